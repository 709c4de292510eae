// A Node API Troupe uses (workerd provides it under nodejs_compat); declared here rather than pulling in @types/node.
declare module "node:async_hooks" {
  export class AsyncLocalStorage<T> {
    run<R>(store: T, fn: () => R): R;
    getStore(): T | undefined;
  }
}
