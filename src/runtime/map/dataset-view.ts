/** A run's view of a persistent dataset, as users read it (API.md "Datasets"). */
import type { Row } from "../../play/types";
import type { SheetRow } from "../../contracts/shards";
import type { SheetClient } from "../../clients/shards";

export const MAX_PAGE_ROWS = 1000;

/** The public shape of a row: its data plus `_key`, `_status`, `_error`. */
export function viewRow(row: SheetRow): Row {
  return { ...row.data, _key: row.key, _status: row.status, _error: row.error };
}

/** One page of the run's rows, in input order. */
export async function readPage(sheets: SheetClient, runId: string, offset: number, limit: number): Promise<Row[]> {
  const rows = await sheets.readRunRows(runId, offset, offset + Math.min(limit, MAX_PAGE_ROWS));
  return rows.map(viewRow);
}
