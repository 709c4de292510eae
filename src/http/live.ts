/**
 * `GET /v1/runs/<id>/live` (API.md "Events and live progress"): authenticated
 * and checked against the org here, before any upgrade; then the upgrade is
 * handed to the run's coordinator, which holds the ledger and the sockets.
 */
import { Hono } from "hono";
import { z } from "zod";
import { VERIFIED_ORG_HEADER } from "../actors/RunCoordinator";
import { TroupeError } from "../core/errors";
import type { AppEnv } from "./context";
import { validate } from "./errors";
import { coordinatorOf, runNotFound } from "./runs";

const LiveQuery = z.object({
  /** Resume after this ledger `seq` (0: from the start). */
  after: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
});

export const liveRoutes = new Hono<AppEnv>();

liveRoutes.get("/runs/:runId/live", async (c) => {
  const runId = c.req.param("runId");
  const query = validate(LiveQuery, { after: c.req.query("after") }, "the query");
  const coordinator = coordinatorOf(c.env, runId);
  if (!(await coordinator.getRun(c.get("org")))) throw runNotFound(runId);
  if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") {
    throw new TroupeError("upgrade_required", "this is a WebSocket endpoint: connect with Upgrade: websocket", { httpStatus: 426 });
  }
  // The token stays here: the coordinator keeps the URL with each connection, and needs only the verified org.
  const url = new URL(c.req.url);
  url.search = `?after=${query.after}`;
  // Only what the upgrade needs goes on: a client's `x-partykit-*` headers would be read as the socket's room and props.
  const headers = new Headers({ Upgrade: "websocket", [VERIFIED_ORG_HEADER]: c.get("org") });
  for (const [name, value] of c.req.raw.headers) if (name.startsWith("sec-websocket-")) headers.set(name, value);
  return coordinator.fetch(new Request(url, { headers }));
});
