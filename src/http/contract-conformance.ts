/**
 * Compile-time only: the server's answers still fit the contract that the
 * client, the CLI and the dashboard are typed by (src/api/responses.ts). A
 * change to a run's view or the links that a client could not read
 * fails `npm run typecheck` here, not in a user's terminal.
 */
import type * as Contract from "../api/contract";
import type { Estimate } from "../runtime/tools/estimate";
import type { SnapshotMessage } from "../runtime/views/live-feed";
import type { RunView } from "../runtime/views/run-view";
import type { RunLinks } from "../runtime/views/links";

/** Compiles only when `Server` is assignable to `Client`. */
type Fits<Server extends Client, Client> = [Server, Client];

export type ContractConformance = [
  Fits<RunView, Contract.RunView>,
  Fits<SnapshotMessage, Contract.SnapshotMessage>,
  Fits<RunLinks, Contract.RunLinks>,
  Fits<Estimate, Contract.Estimate>,
];
