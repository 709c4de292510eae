import { DurableObject } from "cloudflare:workers";

export class OrgDirectory extends DurableObject<Env> {}
