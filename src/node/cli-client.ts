// Client subcommands of `shardex` (import, export, get, search, delete, commit, cluster).
import type { Command } from 'commander';

export function registerClientCommands(program: Command): void {
  void program;
}
