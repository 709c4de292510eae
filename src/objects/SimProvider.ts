import { DurableObject } from "cloudflare:workers";

export class SimProvider extends DurableObject<Env> {}
