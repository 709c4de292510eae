/**
 * The API token, entered once and kept in this browser's localStorage for
 * this origin. It is the same bearer token the CLI uses; anyone with access
 * to this browser profile can read it, so "Sign out" forgets it.
 */

const KEY = "troupe.token";

/** The stored token, or null when none was entered (or storage is unavailable). */
export function storedToken(): string | null {
  try {
    const token = localStorage.getItem(KEY);
    return token && token.trim() ? token.trim() : null;
  } catch (error) {
    // Storage can be disabled (privacy modes): the token is then asked for on each visit.
    console.warn("troupe: localStorage is unavailable", error);
    return null;
  }
}

/** Keeps the token for later visits. */
export function storeToken(token: string): void {
  try {
    localStorage.setItem(KEY, token.trim());
  } catch (error) {
    console.warn("troupe: the token cannot be kept in localStorage", error);
  }
}

/** Forgets the token (sign out, or the server refused it). */
export function forgetToken(): void {
  try {
    localStorage.removeItem(KEY);
  } catch (error) {
    console.warn("troupe: localStorage is unavailable", error);
  }
}
