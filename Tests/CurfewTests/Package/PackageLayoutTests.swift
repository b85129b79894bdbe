import Foundation
import Testing

/// ARCHITECTURE.md's table of targets is Package.swift's: every target under
/// `Sources/` is a row, and its "depends on" column names exactly the
/// target's dependencies.
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
        for target in try #require(package["targets"] as? [[String: Any]]) {
            let name = try #require(target["name"] as? String)
            let path = target["path"] as? String ?? "Sources/\(name)"
            // Examples, fixtures and tests are not layers of the host.
            guard path.hasPrefix("Sources/") || path == "include", target["type"] as? String != "test" else { continue }
            let dependencies = try #require(target["dependencies"] as? [[String: Any]])
            declared[name] = Set(dependencies.compactMap { ($0.values.first as? [Any])?.first as? String })
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

    /// The `code spans` of a table cell.
    private static func quoted(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
    }
}
