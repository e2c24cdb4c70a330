// Whether a process id names a live process (signal 0 checks without signalling; EPERM means it
// exists under another user). Used for lock files and for leftovers of crashed test runs.
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
