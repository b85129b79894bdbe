import CCurfew
import CLibFFI
import _CurfewFFI

/// One function of a foreign job, with its call interface prepared once, at load.
final class ForeignFunction: @unchecked Sendable {
    // Safe because every stored property is set in init and never changed,
    // and the memory they point to is never freed (plugins are never unloaded).
    let symbol: String
    let address: @convention(c) () -> Void
    let returnType: ForeignType
    let argumentTypes: [ForeignType]
    let sources: [ForeignArgumentSource]
    let cif: UnsafeMutablePointer<ffi_cif>
    private let ffiArgumentTypes: UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>

    init?(symbol: String, address: UnsafeMutableRawPointer, returnType: ForeignType, arguments: [(ForeignType, ForeignArgumentSource)]) {
        self.symbol = symbol
        self.address = unsafeBitCast(address, to: (@convention(c) () -> Void).self)
        self.returnType = returnType
        self.argumentTypes = arguments.map(\.0)
        self.sources = arguments.map(\.1)
        cif = .allocate(capacity: 1)
        ffiArgumentTypes = .allocate(capacity: max(arguments.count, 1))
        for (index, type) in argumentTypes.enumerated() { ffiArgumentTypes[index] = type.ffiType }
        let status = ffi_prep_cif(cif, curfew_ffi_default_abi(), UInt32(arguments.count), returnType.ffiType, ffiArgumentTypes)
        guard status == FFI_OK else {
            cif.deallocate()
            ffiArgumentTypes.deallocate()
            return nil
        }
    }
}

/// A job described by a manifest and called through libffi.
///
/// It owns the library's handle and the prepared calls, and adapts them to
/// the C ABI's hooks, so the runner runs it like any plugin job.
///
/// - Important: It never calls a symbol the manifest did not declare.
final class ForeignJob: Sendable {
    let libraryPath: String
    let setup: ForeignFunction?
    let chunk: ForeignFunction
    let cleanup: ForeignFunction?
    let teardown: ForeignFunction?
    let resultRule: ForeignResultRule
    /// Bytes of the zeroed state buffer the host owns for each run; 0 for none.
    let stateSize: Int
    /// Whether the chunk index goes on across runs: the host saves it as the
    /// job's checkpoint when the grant expires and starts the next run there.
    let resumes: Bool

    init(libraryPath: String, setup: ForeignFunction?, chunk: ForeignFunction, cleanup: ForeignFunction?,
         teardown: ForeignFunction?, resultRule: ForeignResultRule, stateSize: Int, resumes: Bool = false) {
        self.libraryPath = libraryPath
        self.setup = setup
        self.chunk = chunk
        self.cleanup = cleanup
        self.teardown = teardown
        self.resultRule = resultRule
        self.stateSize = stateSize
        self.resumes = resumes
    }

    /// Whether any of the job's functions takes the chunk index.
    static func takesTheIndex(_ functions: [ForeignFunction?]) -> Bool {
        functions.contains { function in
            function?.sources.contains { if case .chunkIndex = $0 { true } else { false } } ?? false
        }
    }

    /// The hooks this job runs through: the runner calls a foreign job
    /// exactly as it calls a plugin's C job. A chunk whose only changing
    /// argument is the chunk index is called by a C hook, with no Swift in
    /// between: directly for up to four integer or pointer arguments
    /// (`curfew_direct_chunk`), else through libffi (`curfew_ffi_chunk`).
    var hooks: JobHooks {
        guard ForeignFrame.changesOnlyTheIndex(chunk) else { return Self.libffiHooks }
        return ForeignFrame.callsDirectly(chunk) ? Self.directHooks : Self.ffiHooks
    }

    /// The hooks of a job whose chunk goes through ``ForeignFrame/call(chunkIndex:run:state:)``.
    static let libffiHooks = JobHooks(
        create: { context, state in
            guard let run = HostContext.from(context), let foreign = run.job.foreign, let state else { return CURFEW_ERROR }
            let frames = ForeignRun(job: foreign, run: run)
            if let failure = frames.setUp() {
                run.log(.error, failure)
                return CURFEW_ERROR
            }
            state.pointee = Unmanaged.passRetained(frames).toOpaque()
            return CURFEW_OK
        },
        chunk: { _, state in
            // The run owns its frames until destroy: no retain or release per chunk.
            Unmanaged<ForeignRun>.fromOpaque(state!)._withUnsafeGuaranteedRef { $0.callChunk() }
        },
        expire: { _, state, _ in
            Unmanaged<ForeignRun>.fromOpaque(state!)._withUnsafeGuaranteedRef { $0.callCleanup() }
        },
        destroy: { _, state in
            let frames = Unmanaged<ForeignRun>.fromOpaque(state!)
            frames.takeUnretainedValue().callTeardown()
            frames.release()
        })

    /// The hooks of a job whose chunk a C hook calls: its state is the
    /// run's call structure, whose owner is the run.
    private static func cHooks(chunk: curfew_chunk_fn) -> JobHooks {
        JobHooks(
            create: { context, state in
                guard let state, ForeignJob.libffiHooks.create!(context, state) == CURFEW_OK else { return CURFEW_ERROR }
                let frames = Unmanaged<ForeignRun>.fromOpaque(state.pointee!).takeUnretainedValue()
                state.pointee = frames.chunkCall!.state
                return CURFEW_OK
            },
            chunk: chunk,
            expire: { context, state, reason in ForeignJob.libffiHooks.expire!(context, ForeignJob.ownerOf(state), reason) },
            destroy: { context, state in ForeignJob.libffiHooks.destroy!(context, ForeignJob.ownerOf(state)) })
    }

    static let directHooks = cHooks(
        chunk: unsafeBitCast(curfew_direct_chunk as @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int64,
                             to: curfew_chunk_fn.self))
    static let ffiHooks = cHooks(
        chunk: unsafeBitCast(curfew_ffi_chunk as @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int64,
                             to: curfew_chunk_fn.self))

    /// The run a C-called chunk's state belongs to: both call structures
    /// name it first.
    fileprivate static func ownerOf(_ state: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
        state!.load(as: UnsafeMutableRawPointer?.self)
    }
}
