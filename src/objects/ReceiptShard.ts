import { DurableObject } from "cloudflare:workers";

export class ReceiptShard extends DurableObject<Env> {}
