import { DurableObject } from "cloudflare:workers";

export class RunCoordinator extends DurableObject<Env> {}
