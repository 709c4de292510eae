/** Runs: start, read, list, cancel, events (API.md "Runs", "Events"). */
import { Hono } from "hono";
import { z } from "zod";
import { playRegistry } from "../plays";
import { NotFoundError, ValidationError } from "../shared/errors";
import type { AppEnv } from "./app";
import { validate } from "./errors";

export const StartRunBody = z.object({
  play: z.string().min(1).max(64),
  input: z.unknown(),
  force: z.boolean().default(false),
  forceToolRefresh: z.boolean().default(false),
}).strict();
export type StartRunBody = z.infer<typeof StartRunBody>;

const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(500).optional(),
});

const EventsQuery = z.object({
  after: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

const RUN_ID = /^run_[0-9a-f]{32}$/;

/** The coordinator of a run id, or a 404 for ids this API never gave out. */
export function coordinatorOf(env: Env, runId: string) {
  if (!RUN_ID.test(runId)) throw runNotFound(runId);
  return env.RUN_COORDINATOR.getByName(runId);
}

export function runNotFound(runId: string): NotFoundError {
  return new NotFoundError("run_not_found", `no run ${JSON.stringify(runId)} in this org`);
}

export async function readJsonBody(request: Request): Promise<unknown> {
  const text = await request.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new ValidationError("the body is not valid JSON", [{ path: "(body)", message: "invalid JSON" }]);
  }
}

export const runRoutes = new Hono<AppEnv>();

runRoutes.get("/plays", (c) => c.json({ plays: [...playRegistry(c.env).values()].map((p) => ({ name: p.name, description: p.description })) }));

runRoutes.post("/runs", async (c) => {
  const body = validate(StartRunBody, await readJsonBody(c.req.raw), "the run request");
  const play = playRegistry(c.env).get(body.play);
  if (!play) throw new NotFoundError("unknown_play", `no play named ${JSON.stringify(body.play)}; GET /v1/plays lists them`);
  const input = validate(play.input, body.input, `input for play ${body.play}`, ["input"]);
  const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
  const run = await c.env.RUN_COORDINATOR.getByName(runId).start({
    runId, org: c.get("org"), play: play.name, input, force: body.force, forceToolRefresh: body.forceToolRefresh, parentRunId: null,
  });
  const self = `/v1/runs/${runId}`;
  return c.json({ runId, status: run.status, links: { self, live: `${self}/live`, events: `${self}/events` } }, 202);
});

runRoutes.get("/runs", async (c) => {
  const query = validate(ListQuery, c.req.query(), "the query");
  if (query.cursor !== undefined && !/^[A-Za-z0-9+/=]+$/.test(query.cursor)) {
    throw new ValidationError("cursor is not one this API gave out", [{ path: "cursor", message: "unknown cursor" }]);
  }
  const page = await c.env.ORG_DIRECTORY.getByName(c.get("org")).list({ limit: query.limit, cursor: query.cursor ?? null });
  return c.json({
    runs: page.runs.map((r) => ({ runId: r.runId, play: r.play, status: r.status, parentRunId: r.parentRunId, createdAt: new Date(r.createdAt).toISOString(), updatedAt: new Date(r.updatedAt).toISOString() })),
    nextCursor: page.nextCursor,
  });
});

runRoutes.get("/runs/:runId", async (c) => {
  const runId = c.req.param("runId");
  const run = await coordinatorOf(c.env, runId).getRun(c.get("org"));
  if (!run) throw runNotFound(runId);
  return Response.json(run);
});

runRoutes.post("/runs/:runId/cancel", async (c) => {
  const runId = c.req.param("runId");
  const run = await coordinatorOf(c.env, runId).cancel(c.get("org"));
  if (!run) throw runNotFound(runId);
  return c.json({ runId, status: run.status }, 202);
});

runRoutes.get("/runs/:runId/events", async (c) => {
  const runId = c.req.param("runId");
  const query = validate(EventsQuery, c.req.query(), "the query");
  const page = await coordinatorOf(c.env, runId).events(c.get("org"), query.after, query.limit);
  if (!page) throw runNotFound(runId);
  return c.json(page);
});
