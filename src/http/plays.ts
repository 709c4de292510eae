/** `GET /v1/plays`: what can be run here, each play's input as JSON Schema and the datasets it writes. */
import { Hono } from "hono";
import { inputJsonSchema } from "../play/json-schema";
import { playRegistry } from "../plays";
import type { AppEnv } from "./context";

/** `GET /plays` (mounted under /v1): `{ plays: [{ name, description, version, input, datasets }] }`. */
export const playRoutes = new Hono<AppEnv>();

playRoutes.get("/plays", (c) =>
  c.json({
    plays: [...playRegistry(c.env).values()].map((p) => ({
      name: p.name,
      description: p.description,
      version: p.version ?? null,
      input: inputJsonSchema(p.input),
      datasets: p.datasets ?? [],
    })),
  }),
);
