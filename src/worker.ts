export { RunCoordinator } from "./objects/RunCoordinator";
export { SheetShard } from "./objects/SheetShard";
export { ReceiptShard } from "./objects/ReceiptShard";
export { OrgDirectory } from "./objects/OrgDirectory";
export { SimProvider } from "./objects/SimProvider";

export default {
  async fetch(): Promise<Response> {
    return new Response("troupe");
  },
} satisfies ExportedHandler<Env>;
