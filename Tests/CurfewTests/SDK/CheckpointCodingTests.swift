import Testing

@testable import Curfew
@testable import CurfewJob
import CurfewFormats

/// Codable checkpoints in the Swift SDK: JSON text of the SDK's own
/// encoder, read back through the host's JSON reader.
@Suite struct CheckpointCodingTests {
    struct Position: Codable, Equatable {
        enum Phase: String, Codable { case scanning, writing }
        struct Window: Codable, Equatable {
            var from: Int64
            var to: UInt64
        }

        var file: String
        var offset: Int
        var phase: Phase
        var ratio: Double
        var scale: Float
        var window: Window
        var pending: [UInt8]
        var note: String?
        var counts: [String: Int]
        var byNumber: [Int: String]
        var flags: [Bool]
        var nested: [[Int16]]
    }

    static let position = Position(
        file: "a \"quoted\"\nname\u{1}, ünïcode 🦊", offset: 1_234_567, phase: .writing, ratio: 0.1, scale: -2.5e-7,
        window: .init(from: .min, to: .max), pending: [0, 255, 7], note: nil, counts: ["x": 1, "": -2],
        byNumber: [3: "three", -1: "minus one"], flags: [true, false], nested: [[], [Int16.min, Int16.max]])

    func text(_ value: some Encodable) throws -> String {
        String(decoding: try CheckpointEncoding.encode(value), as: UTF8.self)
    }

    func roundTrip<Value: Codable & Equatable>(_ value: Value) throws -> Value {
        try CheckpointDecoding.decode(Value.self, from: try CheckpointEncoding.encode(value))
    }

    @Test func aValueComesBackAsItWasSaved() throws {
        #expect(try roundTrip(Self.position) == Self.position)
        #expect(try roundTrip(-0.0 as Double).sign == .minus)
        #expect(try roundTrip(Double.leastNonzeroMagnitude) == .leastNonzeroMagnitude)
        #expect(try roundTrip(Double.greatestFiniteMagnitude) == .greatestFiniteMagnitude)
        #expect(try roundTrip(Float.greatestFiniteMagnitude) == .greatestFiniteMagnitude)
        #expect(try roundTrip(Optional<Int>.none) == nil)
        #expect(try roundTrip([Int?.none, 3]) == [nil, 3])
    }

    @Test func theTextIsJSONThatReadsInOrder() throws {
        struct Small: Codable { var file = "log.txt"; var offset = 42; var done = false }
        #expect(try text(Small()) == #"{"file":"log.txt","offset":42,"done":false}"#)
        #expect(try text([1.5, 1e-5]) == "[1.5,1e-05]")
        // What the encoder writes, the host's reader reads.
        _ = try JSONReader.parse(try CheckpointEncoding.encode(Self.position))
    }

    @Test func aNumberJSONCannotHoldIsRefusedWithItsPlace() throws {
        struct Odd: Codable { var ratio: [Double] }
        #expect(throws: CheckpointError.notEncodable("at ratio.[1]: nan is not a number JSON can hold")) {
            try CheckpointEncoding.encode(Odd(ratio: [1, .nan]))
        }
        #expect(throws: CheckpointError.notEncodable("inf is not a number JSON can hold")) {
            try CheckpointEncoding.encode(Float.infinity)
        }
    }

    /// Nested arrays, `levels` deep.
    indirect enum Nest: Codable, Equatable {
        case leaf
        case inner(Nest)

        init(levels: Int) { self = levels <= 1 ? .leaf : .inner(Nest(levels: levels - 1)) }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            if case .inner(let inner) = self { try container.encode(inner) }
        }

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            self = container.isAtEnd ? .leaf : .inner(try container.decode(Nest.self))
        }
    }

    @Test func whatTheReaderWouldRefuseIsRefusedAtSave() throws {
        // As deep and as wide as the host's reader takes: saved and loaded.
        let deepest = Nest(levels: JSONReader.maximumDepth)
        #expect(try roundTrip(deepest) == deepest)
        let widest = Dictionary(uniqueKeysWithValues: (0..<JSONReader.maximumMembers).map { ("k\($0)", $0) })
        #expect(try roundTrip(widest) == widest)
        // One more the reader refuses ...
        let depth = JSONReader.maximumDepth + 1
        #expect(throws: JSONSyntaxError.self) {
            try JSONReader.parse(Array((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8))
        }
        let keys = (0...JSONReader.maximumMembers).map { "\"k\($0)\":0" }.joined(separator: ",")
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(Array("{\(keys)}".utf8)) }
        // ... so the encoder refuses it when it is saved, not when the next run loads it.
        #expect(throws: CheckpointError.notEncodable("\(Array(repeating: "[0]", count: 64).joined(separator: ".")) nests deeper than 64 levels")) {
            try CheckpointEncoding.encode(Nest(levels: JSONReader.maximumDepth + 1))
        }
        var wider = widest
        wider["one more"] = 0
        #expect(throws: CheckpointError.notEncodable("the value has 10001 keys; a checkpoint object holds at most 10000")) {
            try CheckpointEncoding.encode(wider)
        }
    }

    @Test(arguments: [
        ("not json", "the checkpoint is not JSON (line 1, column 1: "),
        (#"{"file":"a","offset":"12"}"#, "at offset: expected an integer, found a string"),
        (#"{"file":"a"}"#, "no \"offset\" in the checkpoint"),
        (#"{"file":"a","offset":1.5}"#, "at offset: 1.5 is not a whole number that fits Int"),
        (#"[1,2]"#, "expected an object, found an array"),
    ])
    func aCheckpointOfAnotherShapeSaysWhere(text: String, problem: String) throws {
        struct Small: Codable { var file: String; var offset: Int }
        let error = try #require(throws: CheckpointError.self) {
            try CheckpointDecoding.decode(Small.self, from: Array(text.utf8))
        }
        guard case .notDecodable(let description) = error else { Issue.record("\(error)"); return }
        #expect(description.hasPrefix(problem), "\(description)")
    }

    @Test func numbersOutOfRangeAreRefusedNotWrapped() throws {
        #expect(throws: CheckpointError.self) { try CheckpointDecoding.decode(UInt8.self, from: Array("256".utf8)) }
        #expect(throws: CheckpointError.self) { try CheckpointDecoding.decode(Int64.self, from: Array("9223372036854775808".utf8)) }
        #expect(throws: CheckpointError.self) { try CheckpointDecoding.decode(UInt.self, from: Array("-1".utf8)) }
        #expect(throws: CheckpointError.self) { try CheckpointDecoding.decode(Float.self, from: Array("1e39".utf8)) }
        #expect(throws: CheckpointError.self) { try CheckpointDecoding.decode([Int].self, from: Array("[1,[2]]".utf8)) }
    }
}
