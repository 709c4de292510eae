/** The part of `node:crypto` (nodejs_compat) Troupe uses: a synchronous hash inside a storage transaction. */
declare module "node:crypto" {
  interface Hash {
    update(data: string): Hash;
    digest(encoding: "hex"): string;
  }
  export function createHash(algorithm: "sha256"): Hash;
}
