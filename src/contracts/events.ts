/** The ledger's emitter, typed by the event contract (src/api/responses.ts) that clients read. */
import type { LedgerEventFields, LedgerEventType } from "../api/responses";

/** Appends one event of `type` with its fields to the run's ledger (and tells the run's watchers). */
export type Emit = <Type extends LedgerEventType>(type: Type, data: LedgerEventFields[Type]) => void;
