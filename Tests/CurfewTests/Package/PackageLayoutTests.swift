import Foundation
import Testing

/// ARCHITECTURE.md's table of targets is Package.swift's: every target whose
/// sources are under `Sources/` is a row, and its "depends on" column names
/// exactly the target's dependencies. SwiftPM's own import check
/// (`--explicit-target-dependency-import-check`) is best effort and skips
/// the tests; the import check here reads every target's sources.
@Suite struct PackageLayoutTests {
    @Test func theArchitecturesTargetsAreThePackagesTargets() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("curfew-dump-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let dump = try await Fixtures.run(
            "/usr/bin/env", ["swift", "package", "--scratch-path", scratch.path, "dump-package"],
            in: Fixtures.packageRoot.path, timeout: .seconds(120))
        try #require(dump.status == 0, "swift package dump-package: \(dump.stderr)")
        let package = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        var declared: [String: Set<String>] = [:]
        var folders: [String: String] = [:]
        for target in try #require(package["targets"] as? [[String: Any]]) {
            let name = try #require(target["name"] as? String)
            let isTest = target["type"] as? String == "test"
            let path = target["path"] as? String ?? (isTest ? "Tests/" : "Sources/") + name
            let dependencies = try #require(target["dependencies"] as? [[String: Any]])
            let names = Set(dependencies.compactMap { ($0.values.first as? [Any])?.first as? String })
            folders[name] = path
            // Examples, fixtures and tests are not layers of the host.
            guard path.hasPrefix("Sources/") || path == "include", !isTest else { continue }
            declared[name] = names
        }
        // Every target imports only targets it declares: a lower layer
        // cannot reach a higher one through a module already built.
        for (name, folder) in folders {
            let allowed = Set(try #require(Self.dependencies(of: name, in: package)))
            for file in Self.swiftFiles(under: Fixtures.packageRoot.appendingPathComponent(folder)) {
                let text = try String(contentsOf: file, encoding: .utf8)
                for imported in Self.imports(in: text) where folders[imported] != nil && imported != name {
                    #expect(allowed.contains(imported), "\(file.lastPathComponent) imports \(imported), which \(name) does not declare")
                }
            }
        }

        let architecture = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("ARCHITECTURE.md"), encoding: .utf8)
        let table = try #require(architecture.components(separatedBy: "| target | depends on |").dropFirst().first)
        var documented: [String: Set<String>] = [:]
        for row in table.split(separator: "\n").dropFirst(2) {
            guard row.hasPrefix("|") else { break }
            let cells = row.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 3, let name = Self.quoted(cells[1]).first else { continue }
            // "none (`include/`)": what follows "none" is a note, not a target.
            documented[name] = cells[2].hasPrefix("none") ? [] : Set(Self.quoted(cells[2]))
        }
        #expect(Set(documented.keys) == Set(declared.keys), "ARCHITECTURE.md's targets against Package.swift's")
        for (name, dependencies) in declared {
            #expect(documented[name] == dependencies, "\(name): ARCHITECTURE.md says \(documented[name].map { $0.sorted() } ?? []), Package.swift \(dependencies.sorted())")
        }
    }

    /// `EINTR` is retried in one place, the seam (`Syscalls`): a loop of
    /// its own elsewhere is a retry the seam's tests do not cover.
    @Test func noFileButTheSeamHandlesEINTR() throws {
        let sources = Fixtures.packageRoot.appendingPathComponent("Sources")
        for file in Self.swiftFiles(under: sources) where file.lastPathComponent != "Syscalls.swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                #expect(!code.replacing("retryingEINTR", with: "").contains("EINTR"), "\(file.lastPathComponent):\(number + 1): \(line)")
            }
        }
    }

    /// libc is reached through the system layer alone: no other target's
    /// file imports Glibc, nor Foundation, which re-exports it. Without
    /// either, the compiler refuses a libc call anywhere else.
    @Test func onlyTheSystemLayerImportsLibc() throws {
        let sources = Fixtures.packageRoot.appendingPathComponent("Sources")
        let system = sources.appendingPathComponent("CurfewSystem").standardizedFileURL.path + "/"
        var importers: [String] = []
        for file in Self.swiftFiles(under: sources) {
            let imported = Set(Self.imports(in: try String(contentsOf: file, encoding: .utf8)))
            #expect(imported.isDisjoint(with: ["Foundation", "FoundationEssentials"]), "\(file.lastPathComponent) imports Foundation")
            if imported.contains("Glibc") { importers.append(file.standardizedFileURL.path) }
        }
        #expect(!importers.isEmpty, "the system layer imports Glibc")
        for path in importers {
            #expect(path.hasPrefix(system), "\(path) imports Glibc outside Sources/CurfewSystem")
        }
    }

    private static func dependencies(of name: String, in package: [String: Any]) -> [String]? {
        let targets = package["targets"] as? [[String: Any]] ?? []
        guard let target = targets.first(where: { $0["name"] as? String == name }),
            let dependencies = target["dependencies"] as? [[String: Any]]
        else { return nil }
        return dependencies.compactMap { ($0.values.first as? [Any])?.first as? String }
    }

    private static func swiftFiles(under folder: URL) -> [URL] {
        let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
        return (walker?.allObjects as? [URL] ?? []).filter { $0.pathExtension == "swift" }
    }

    /// The modules a file imports (`import X`, `@testable import X`, …): at
    /// the start of a line, as an import in a string literal (a template)
    /// is indented with its literal.
    private static func imports(in text: String) -> [String] {
        text.split(separator: "\n").compactMap { line in
            guard line.first == "i" || line.first == "@" else { return nil }
            let words = line.split(separator: " ")
            guard let at = words.firstIndex(of: "import"), words[..<at].allSatisfy({ $0.hasPrefix("@") }), at + 1 < words.count else { return nil }
            return String(words[at + 1])
        }
    }

    /// The `code spans` of a table cell.
    private static func quoted(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
    }
}
