/**
 * The public `/v1/sim` surface (mounted by the HTTP layer behind auth): stats,
 * config and reset, forwarded to the simulator object.
 */
import { Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { TroupeError } from "../core/errors";
import { resetSim, simConfig, simStats, updateSimConfig } from "../sim/client";
import { parse, readJson, SimConfigPatch } from "../sim/protocol";

/**
 * `GET /stats`, `GET /config`, `PUT /config`, `POST /reset`. Invalid bodies
 * throw `ValidationError` for the host's `onError`.
 *
 * @example app.route("/v1/sim", simRoutes);
 */
export const simRoutes = new Hono<{ Bindings: Env }>();

simRoutes.get("/stats", async (c) => c.json(await simStats(c.env)));

simRoutes.get("/config", async (c) => c.json(await simConfig(c.env)));

simRoutes.put("/config", async (c) => {
  const patch = parse(SimConfigPatch, await readJson(c.req.raw), "config");
  const reply = await updateSimConfig(c.env, patch);
  if (reply.status !== 200) {
    // The object re-validates; it only disagrees if the schemas diverge.
    throw new TroupeError(reply.body?.error?.code ?? "sim_error", reply.body?.error?.message ?? "The simulator rejected the config.", {
      httpStatus: reply.status,
    });
  }
  return c.json(reply.body, reply.status as ContentfulStatusCode);
});

simRoutes.post("/reset", async (c) => c.json(await resetSim(c.env)));
