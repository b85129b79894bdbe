import CSQLite

/// One SQLite connection and its prepared statements. Not thread-safe:
/// its owner (``StateStore``) uses it under a lock.
final class SQLiteConnection {
    /// A value bound to a statement's parameter or read from a column.
    enum Value: Equatable {
        case integer(Int64)
        case real(Double)
        case text(String)
        case blob([UInt8])
        case null
    }

    let path: String
    private let handle: OpaquePointer
    private var statements: [String: OpaquePointer] = [:]

    /// Opens (creating when missing, if `creating`) the database at `path`,
    /// never through a symlink.
    init(path: String, creating: Bool = true) throws(CurfewError) {
        self.path = path
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | (creating ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        let status = sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let text = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_close(handle)
            throw CurfewError(.stateUnavailable, "cannot open the state store \(path): \(text)", underlying: text)
        }
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    /// Runs `sql` (one statement or several, no parameters, rows ignored).
    func execute(_ sql: String) throws(CurfewError) {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        guard status == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_free(message)
            throw failure(text, status: status)
        }
    }

    /// How long a statement waits for another connection's lock before it
    /// fails busy (SQLite's busy handler; what `PRAGMA busy_timeout` sets,
    /// without a statement to parse). Under a millisecond is no wait; past
    /// `Int32.max` milliseconds it is clamped, where the PRAGMA's parse
    /// read such a number as 0.
    func waitWhenBusy(upTo duration: Duration) {
        sqlite3_busy_timeout(handle, Int32(clamping: duration.milliseconds))
    }

    /// Runs one statement with `values` bound to its parameters, in order,
    /// and returns its rows.
    @discardableResult
    func query(_ sql: String, _ values: [Value] = []) throws(CurfewError) -> [[Value]] {
        let statement = try prepared(sql)
        defer {
            virtualMachineSteps &+= Int(sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_VM_STEP, 1))
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let status: Int32
            switch value {
            case .integer(let number): status = sqlite3_bind_int64(statement, index, number)
            case .real(let number): status = sqlite3_bind_double(statement, index, number)
            case .text(let text): status = sqlite3_bind_text(statement, index, text, -1, transient)
            case .blob(let bytes):
                status = bytes.withUnsafeBytes { sqlite3_bind_blob64(statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), UInt64($0.count), transient) }
            case .null: status = sqlite3_bind_null(statement, index)
            }
            guard status == SQLITE_OK else { throw failure(lastMessage, status: status) }
        }
        var rows: [[Value]] = []
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { return rows }
            guard status == SQLITE_ROW else { throw failure(lastMessage, status: status) }
            rows.append((0..<sqlite3_column_count(statement)).map { column(statement, $0) })
        }
    }

    /// Runs `body` in one transaction (`BEGIN IMMEDIATE`: the write lock is
    /// taken at once, so a busy store is waited on here, not mid-way).
    func transaction<T>(_ body: () throws(CurfewError) -> T) throws(CurfewError) -> T {
        try query("BEGIN IMMEDIATE")
        do {
            let value = try body()
            try query("COMMIT")
            return value
        } catch {
            _ = try? query("ROLLBACK")
            throw error
        }
    }

    /// Copies this whole database into `target` (SQLite's online backup,
    /// in one step: a consistent snapshot of it).
    func copy(into target: SQLiteConnection) throws(CurfewError) {
        guard let backup = sqlite3_backup_init(target.handle, "main", handle, "main") else {
            throw failure(target.lastMessage, status: sqlite3_errcode(target.handle))
        }
        let status = sqlite3_backup_step(backup, -1)
        let finished = sqlite3_backup_finish(backup)
        guard status == SQLITE_DONE, finished == SQLITE_OK else {
            throw failure(target.lastMessage, status: status == SQLITE_DONE ? finished : status)
        }
    }

    /// The rows the last statement changed.
    var changes: Int { Int(sqlite3_changes64(handle)) }

    /// The steps SQLite's virtual machine has taken for this connection's
    /// queries: what a query costs, counted, not timed (for tests).
    private(set) var virtualMachineSteps = 0

    private func prepared(_ sql: String) throws(CurfewError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw failure(lastMessage, status: status) }
        statements[sql] = statement
        return statement
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> Value {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard let text = sqlite3_column_text(statement, index) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let bytes = sqlite3_column_blob(statement, index) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }

    private var lastMessage: String { String(cString: sqlite3_errmsg(handle)) }

    private func failure(_ text: String, status: Int32) -> CurfewError {
        let code: CurfewError.Code = status & 0xFF == SQLITE_BUSY || status & 0xFF == SQLITE_LOCKED ? .stateBusy : .stateUnavailable
        return CurfewError(code, "the state store \(path) failed: \(text)", underlying: text)
    }
}

/// SQLite's SQLITE_TRANSIENT: it copies what is bound before the call returns.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

extension SQLiteConnection.Value {
    var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
    var real: Double? {
        switch self {
        case .real(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }
    var text: String? { if case .text(let value) = self { value } else { nil } }
    var blob: [UInt8]? {
        switch self {
        case .blob(let value): value
        case .text(let value): Array(value.utf8)
        default: nil
        }
    }
}
