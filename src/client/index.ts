/**
 * `troupe/client`: the typed client of Troupe's HTTP API, and the contract's
 * types. Free of Node-only APIs: it runs in Node ≥ 22 and in browsers. It
 * loads no schema library: the request types come from the server's zod
 * schemas (src/api/contract.ts) as types only.
 *
 * @example
 * import { TroupeClient } from "troupe/client";
 * const troupe = new TroupeClient({ baseUrl: process.env.TROUPE_URL, token: process.env.TROUPE_TOKEN });
 * const { runId } = await troupe.submit({ play: "demo-enrich", input: { rows } });
 */
export { TroupeClient, DEFAULT_BASE_URL, DEFAULT_TOKEN, type EventsOptions, type TroupeClientOptions } from "./TroupeClient.ts";
export { isTransient, TroupeApiError } from "./errors.ts";
export { TERMINAL_EVENTS, TERMINAL_STATUSES } from "../api/responses.ts";
export type { RerunRequest, SignalRequest, StartRun } from "../api/contract.ts";
export type {
  DatasetPage,
  ErrorBody,
  Estimate,
  EventPage,
  LedgerEvent,
  LiveMessage,
  MapProgress,
  MultipartUploadStarted,
  PlayList,
  ReadyUpload,
  ReceivingUpload,
  RerunStarted,
  RunCancelled,
  RunError,
  RunLinks,
  RunList,
  RunStarted,
  RunStatus,
  RunSummary,
  RunView,
  SignalDelivered,
  SnapshotMessage,
  Spend,
  Upload,
  UploadList,
  UploadPartReceived,
  UploadView,
} from "../api/responses.ts";
