/** The ledger's emitter, typed by the event contract (src/api/responses.ts) that clients read. */
import type { LedgerEventFields, LedgerEventType, NoticeCode } from "../api/responses";

export type { NoticeCode } from "../api/responses";

/** The longest log line the run keeps: a longer one is cut there, wherever the play ran. */
export const MAX_LOG_LINE = 4000;

/** Appends a line to the run's log; `code` says what the runtime did, when the line reports that. */
export type Log = (line: string, code?: NoticeCode) => void;

/** Appends one event of `type` with its fields to the run's ledger (and tells the run's watchers). */
export type Emit = <Type extends LedgerEventType>(type: Type, data: LedgerEventFields[Type]) => void;
