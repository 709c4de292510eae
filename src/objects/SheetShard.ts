import { DurableObject } from "cloudflare:workers";

export class SheetShard extends DurableObject<Env> {}
