/** What every route sees: the Worker's bindings and the org its token resolved to (set by the auth middleware in app.ts). */
export type AppEnv = { Bindings: Env; Variables: { org: string } };
