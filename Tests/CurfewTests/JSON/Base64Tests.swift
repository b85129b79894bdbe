@testable import CurfewFormats
import Foundation
import Testing

/// Base64 carries checkpoints across a worker's channel: checked against
/// Foundation's, and strict on what it takes.
@Suite struct Base64Tests {
    @Test func everyLengthRoundTripsAndMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in Array(0...70) + [4095, 4096, 4097, 1 << 20] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Base64.encode(bytes)
            #expect(text == Data(bytes).base64EncodedString(), "length \(length)")
            #expect(Base64.decode(text) == bytes, "length \(length)")
            #expect(Base64.encode(bytes[...]) == text, "a slice, length \(length)")
        }
    }

    @Test(arguments: ["Zg=", "Zh==", "Zm9=", "Zg==Zg==", "Z===", "====", "Zm9v!A==", "Zm 9v", "Zg\u{e9}=", "="])
    func whatIsNotCanonicalBase64IsRefused(text: String) {
        #expect(Base64.decode(text) == nil)
    }

    @Test func theEdgesOfTheAlphabetDecode() {
        #expect(Base64.decode("") == [])
        #expect(Base64.decode("+/+/") == [0xFB, 0xFF, 0xBF])
        #expect(Base64.decode("AAAA") == [0, 0, 0])
        #expect(Base64.decode("Zg==") == Array("f".utf8))
        #expect(Base64.decode("Zm8=") == Array("fo".utf8))
    }
}
