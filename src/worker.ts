/** The Worker: the HTTP API, and the Durable Object actors it is made of. */
import { app } from "./http/app";

export { RunCoordinator } from "./actors/RunCoordinator";
export { SheetShard } from "./actors/SheetShard";
export { ReceiptShard } from "./actors/ReceiptShard";
export { OrgDirectory } from "./actors/OrgDirectory";
export { SimProvider } from "./actors/SimProvider";
export { PacingGate } from "./actors/PacingGate";
export { MapExecutor } from "./actors/MapExecutor";
export { DatasetExporter } from "./actors/DatasetExporter";
export { FaultInjector } from "./actors/FaultInjector";

export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
