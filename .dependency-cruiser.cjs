/**
 * The layers of src/, lowest first (src/README.md explains each). A module may
 * import its own layer and the layers below it, never one above, and no import
 * cycle is allowed anywhere. `npm run lint` checks both; `npm test` runs it.
 */
const LAYERS = [
  ["core", "^src/core/"],
  ["play", "^src/play/"],
  ["contracts", "^src/(contracts|api)/"],
  ["stores", "^src/stores/"],
  ["uploads", "^src/uploads/"],
  ["clients", "^src/clients/"],
  ["sim", "^src/sim/"],
  ["runtime", "^src/runtime/"],
  ["catalog", "^src/(plays|tools)/"],
  ["actors", "^src/actors/"],
  ["http", "^src/http/"],
  ["worker", "^src/worker\\.ts$"],
];

// The apps outside the Worker: each may use the HTTP contract, the client and itself only.
const APPS = [
  ["client", "^src/client/", "^src/(api|client)/"],
  ["cli", "^src/cli/", "^src/(api|client|cli)/"],
  ["dashboard", "^src/dashboard/", "^src/(api|client|dashboard)/"],
];

const above = (i) => LAYERS.slice(i + 1).map(([, path]) => path);

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "An import cycle: break it by moving the shared part down a layer.",
      from: {},
      to: { circular: true },
    },
    ...LAYERS.slice(0, -1).map(([name, path], i) => ({
      name: `${name}-imports-up`,
      severity: "error",
      comment: `${name} may import only its own layer and the ones below it (.dependency-cruiser.cjs).`,
      from: { path, pathNot: "\\.test\\.ts$" },
      to: { path: [...above(i), "^src/(client|cli|dashboard)/"] },
    })),
    ...APPS.map(([name, path, allowed]) => ({
      name: `${name}-stays-outside-the-worker`,
      severity: "error",
      comment: `${name} runs outside the Worker: it may import only ${allowed}.`,
      from: { path },
      to: { path: "^src/", pathNot: allowed },
    })),
  ],
  options: {
    tsConfig: { fileName: "tsconfig.json" },
    tsPreCompilationDeps: true,
    exclude: { path: "node_modules" },
    doNotFollow: { path: "node_modules" },
  },
};
