/** The Worker: the HTTP API, and the Durable Object actors it is made of. */
import { app } from "./http/app";

export { RunCoordinator } from "./objects/RunCoordinator";
export { SheetShard } from "./objects/SheetShard";
export { ReceiptShard } from "./objects/ReceiptShard";
export { OrgDirectory } from "./objects/OrgDirectory";
export { SimProvider } from "./objects/SimProvider";
export { PacingGate } from "./objects/PacingGate";
export { FaultInjector } from "./objects/FaultInjector";

export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
