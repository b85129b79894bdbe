extension Substring {
    /// Without spaces or tabs at either end (a header's parameter, a sysfs value).
    package var withoutSpacesAround: Substring {
        let start = firstIndex { $0 != " " && $0 != "\t" } ?? endIndex
        let end = lastIndex { $0 != " " && $0 != "\t" }.map(index(after:)) ?? start
        return self[start..<Swift.max(start, end)]
    }
}
