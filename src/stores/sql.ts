/**
 * The one SQL helper every actor uses: a tagged template that always binds
 * parameters, and ordered schema migrations gated by a version row.
 */

export type SqlValue = string | number | null | ArrayBuffer;

/** A tagged template over one object's SQLite storage. */
export interface Sql {
  <T extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): T[];
  /** Runs a statement and returns how many rows it wrote. */
  write(strings: TemplateStringsArray, ...values: SqlValue[]): number;
}

export function createSql(storage: DurableObjectStorage): Sql {
  const run = (strings: TemplateStringsArray, values: SqlValue[]) => storage.sql.exec(strings.join("?"), ...values);
  const sql = (<T extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) =>
    run(strings, values).toArray() as T[]) as Sql;
  sql.write = (strings, ...values) => {
    const cursor = run(strings, values);
    cursor.toArray();
    return cursor.rowsWritten;
  };
  return sql;
}

/**
 * Applies the migrations past the stored version, in order, in one transaction
 * each. Call inside `blockConcurrencyWhile` from the actor's constructor.
 */
export function migrate(storage: DurableObjectStorage, migrations: readonly string[]): void {
  storage.sql.exec("CREATE TABLE IF NOT EXISTS _schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)");
  const row = storage.sql.exec<{ version: number }>("SELECT version FROM _schema WHERE id = 1").toArray()[0];
  const current = row?.version ?? 0;
  for (let version = current + 1; version <= migrations.length; version++) {
    storage.transactionSync(() => {
      storage.sql.exec(migrations[version - 1]!);
      storage.sql.exec(
        "INSERT INTO _schema (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
        version,
      );
    });
  }
}
