import Testing

@testable import Curfew
@testable import CurfewHost

/// The operator's `--config` file: every key checked, every error naming
/// the file, the job and the key.
@Suite struct ServeConfigTests {
    func parse(_ text: String) throws(CurfewError) -> ServeConfig {
        try ServeConfig.parse(Array(text.utf8), file: "/etc/curfew.json")
    }

    func error(_ text: String) -> String {
        do throws(CurfewError) {
            _ = try parse(text)
            return "no error"
        } catch {
            #expect(error.code == .badConfig)
            return error.description
        }
    }

    @Test func aFullEntryIsReadAndMergedOverTheDefaults() throws {
        let config = try parse(
            """
            {"defaults": {"budget": "30s", "params": {"region": "eu", "mode": "fast"}, "isolate": "plugin",
                          "retry": {"attempts": 2}},
             "jobs": {"tally": {"every": "1m30s", "earliest_begin": 10, "jitter": "500ms", "grace": "2s",
                                "params": {"mode": "slow"}, "isolate": "job",
                                "limits": {"memory": "512MiB", "cpu_time": "1.5s", "open_files": 64},
                                "retry": {"attempts": 5, "delay": "2s", "max_delay": "1m"}, "enabled": false,
                                "modes": ["audio", "x-feed"]}}}
            """)
        let tally = config.policy(for: "tally")
        #expect(tally.every == .seconds(90))
        #expect(tally.earliestBegin == .seconds(10))
        #expect(tally.jitter == .milliseconds(500))
        #expect(tally.budget == .seconds(30), "from the defaults")
        #expect(tally.grace == .seconds(2))
        #expect(tally.parameters == ["region": "eu", "mode": "slow"], "the job's own value wins")
        #expect(tally.isolation == .job)
        #expect(tally.limits == ResourceLimits(memoryBytes: 512 << 20, cpuSeconds: 2, openFiles: 64))
        #expect(tally.retry == RetryPolicy(attempts: 5, delay: .seconds(2), maximumDelay: .seconds(60)))
        #expect(tally.enabled == false)
        #expect(tally.allowedModes == ["audio", "x-feed"])
        let other = config.policy(for: "other")
        #expect(other.isolation == .plugin && other.budget == .seconds(30) && other.retry?.attempts == 2)
        #expect(other.retry?.delay == RetryPolicy.standard.delay)
    }

    @Test func anEmptyObjectIsAConfigWithNoPolicy() throws {
        #expect(try parse("{}") == ServeConfig())
    }

    @Test func everyErrorNamesTheFileTheJobAndTheKey() {
        #expect(error(#"{"jobs": {"tally": {"evry": "5s"}}}"#).hasPrefix(#"/etc/curfew.json: job 'tally': "evry": unknown key"#))
        #expect(error(#"{"defaults": {"budget": "soon"}}"#) == #"/etc/curfew.json: defaults: "budget": "soon" is not a duration such as "500ms", "30s" or "1h""#)
        #expect(error(#"{"jobs": {"t": {"limits": {"memory": "1KiB"}}}}"#).hasPrefix(#"/etc/curfew.json: job 't': "limits.memory": must be a size of at least"#))
        #expect(error(#"{"jobs": {"t": {"limits": {"disk": 1}}}}"#).hasPrefix(#"/etc/curfew.json: job 't': "limits.disk": unknown key"#))
        #expect(error(#"{"jobs": {"t": {"retry": {"attempts": -1}}}}"#).hasPrefix(#"/etc/curfew.json: job 't': "retry.attempts""#))
        #expect(error(#"{"jobs": {"t": {"retry": {"delay": "1m", "max_delay": "1s"}}}}"#).contains(#""retry.max_delay": must be at least the delay"#))
        #expect(error(#"{"jobs": {"t": {"budget": "2s", "grace": "3s"}}}"#).contains(#""grace": The grace 3.000s must be positive and shorter than the budget 2.000s."#))
        #expect(error(#"{"jobs": {"t": {"every": "10ms"}}}"#).contains(#""every": must be at least 100ms"#))
        #expect(error(#"{"jobs": {"t": {"isolate": "vm"}}}"#).contains(#""isolate": must be "none", "plugin" or "job""#))
        #expect(error(#"{"jobs": {"t": {"enabled": "yes"}}}"#).contains(#""enabled": must be true or false, not a string"#))
        #expect(error(#"{"jobs": {"t": {"params": {"k": 1}}}}"#).contains(#""params": "k" must be a string, not a number"#))
        #expect(error(#"{"jobs": {"t": {"every": "1s", "every": "2s"}}}"#).contains(#"duplicate key "every""#), "the reader refuses it")
        #expect(error(#"{"jobs": {"t": {"modes": ["radio"]}}}"#).contains(#""modes": each is a background mode: audio, voip"#))
        #expect(error(#"{"jobs": {"Bad Name": {}}}"#).contains(#""Bad Name" in "jobs" is not a job name"#))
        #expect(error(#"{"job": {}}"#) == #"/etc/curfew.json: unknown key "job" (the config has "defaults" and "jobs")"#)
        #expect(error(#"[1]"#) == "/etc/curfew.json: the config must be a JSON object, not an array")
        #expect(error("{\"jobs\": ").hasPrefix("/etc/curfew.json: line 1, column"))
        #expect(error(#"{"jobs": {"t": 5}}"#) == "/etc/curfew.json: job 't' must be an object, not a number")
    }

    @Test func aMissingFileSaysSo() {
        #expect(throws: CurfewError.self) { try ServeConfig.load(path: "/nonexistent/curfew.json") }
    }
}
