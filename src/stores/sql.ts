/**
 * The one SQL helper every actor uses: a tagged template that always binds
 * parameters, and ordered schema migrations gated by a version row.
 */

import { utf8BytesPast } from "../core/utf8";

export type SqlValue = string | number | null | ArrayBuffer;

/** A tagged template over one object's SQLite storage. */
export interface Sql {
  <T extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): T[];
  /** Runs a statement and returns how many rows it wrote. */
  write(strings: TemplateStringsArray, ...values: SqlValue[]): number;
}

/**
 * The largest string or BLOB a Durable Object's SQLite stores or binds (the
 * platform's limits page: 2 MB). Production enforces it; local workerd does
 * not, so the helper does, everywhere: a write that would fail deployed fails
 * in tests too.
 */
export const MAX_SQL_VALUE_BYTES = 2_000_000;

/** Throws as production would for a bound value past {@link MAX_SQL_VALUE_BYTES}. */
function checkValueSizes(values: SqlValue[]): void {
  for (const value of values) {
    const bytes =
      typeof value === "string"
        ? utf8BytesPast(value, MAX_SQL_VALUE_BYTES)
        : value instanceof ArrayBuffer && value.byteLength > MAX_SQL_VALUE_BYTES
          ? value.byteLength
          : null;
    if (bytes !== null) throw new Error(`string or blob too big: a bound value of ${bytes} bytes (SQLITE_TOOBIG)`);
  }
}

export function createSql(storage: DurableObjectStorage): Sql {
  const run = (strings: TemplateStringsArray, values: SqlValue[]) => {
    checkValueSizes(values);
    return storage.sql.exec(strings.join("?"), ...values);
  };
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

/**
 * Budget, in UTF-16 code units, of one JSON array parameter. SQLite in Durable
 * Objects caps a bound string at 2 MB; 512 Ki code units is at most 1.5 MiB of
 * UTF-8.
 */
export const MAX_PARAM_CHARS = 512 * 1024;

/** Splits items into consecutive non-empty batches of at most {@link MAX_PARAM_CHARS} (a lone larger item is its own batch). */
export function* batches<T>(items: readonly T[], sizeOf: (item: T) => number): Generator<T[]> {
  let batch: T[] = [];
  let chars = 0;
  for (const item of items) {
    const size = sizeOf(item) + 32;
    if (batch.length > 0 && chars + size > MAX_PARAM_CHARS) {
      yield batch;
      batch = [];
      chars = 0;
    }
    batch.push(item);
    chars += size;
  }
  if (batch.length > 0) yield batch;
}
