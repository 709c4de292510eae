/** The plays bundled with the Worker, by name. */
import type { PlayDefinition } from "../play/types";
import { demoEnrich } from "./demo-enrich";

export const plays: ReadonlyMap<string, PlayDefinition> = new Map(
  [demoEnrich as PlayDefinition].map((p) => [p.name, p]),
);
