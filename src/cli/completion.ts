/**
 * `kairos completion bash`: a bash completion script made from the command tree itself, so it
 * offers exactly the sub-commands and options this version has. It completes command names,
 * options (after `-`), the values of options with a fixed set of values (`--status`,
 * `--overlap`, …) and file names for options that take a file or path. Install:
 *
 *   kairos completion bash > ~/.local/share/bash-completion/completions/kairos
 *
 * or `source <(kairos completion bash)` in ~/.bashrc. Ids (jobs, runs) are not completed: that
 * would call the API on every Tab.
 */
import type { Command, Option } from "commander";
import { KairosError } from "../lib/errors.ts";
import type { CliContext } from "./api-command.ts";

interface Node {
  path: string;
  subs: string[];
  opts: string[];
  /** Options taking a value: `--status` → its choices, or "file" / "" (any value). */
  values: Map<string, string[] | "file" | "">;
}

const FILE_ARG = /<(file|path|dir)>/;

function walk(cmd: Command, path: string, out: Node[]): void {
  const visible = cmd.commands.filter((c) => c.name() !== "help");
  const values = new Map<string, string[] | "file" | "">();
  const opts: string[] = ["--help"];
  for (const o of cmd.options as readonly (Option & { hidden?: boolean })[]) {
    if (o.hidden) continue;
    for (const flag of [o.long, o.short]) {
      if (flag === undefined) continue;
      opts.push(flag);
      if (o.required || o.optional)
        values.set(flag, o.argChoices ? [...o.argChoices] : FILE_ARG.test(o.flags) ? "file" : "");
    }
  }
  out.push({ path, subs: visible.map((c) => c.name()), opts, values });
  for (const c of visible) walk(c, path === "" ? c.name() : `${path}/${c.name()}`, out);
}

const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** The bash completion script for `program`. */
export function bashCompletion(program: Command): string {
  const nodes: Node[] = [];
  walk(program, "", nodes);
  const subs = nodes.map((n) => `    ${q(n.path)}) echo ${q(n.subs.join(" "))} ;;`).join("\n");
  const opts = nodes.map((n) => `    ${q(n.path)}) echo ${q(n.opts.join(" "))} ;;`).join("\n");
  const values = nodes
    .flatMap((n) =>
      [...n.values].map(([flag, v]) => {
        const reply =
          v === "file"
            ? `COMPREPLY=($(compgen -f -- "$cur"))`
            : v === ""
              ? "COMPREPLY=()"
              : `COMPREPLY=($(compgen -W ${q(v.join(" "))} -- "$cur"))`;
        return `    ${q(`${n.path}|${flag}`)}) ${reply}; return 0 ;;`;
      }),
    )
    .join("\n");
  return `# bash completion for kairos (made by \`kairos completion bash\`)
_kairos_subs() {
  case "$1" in
${subs}
  esac
}
_kairos_opts() {
  case "$1" in
${opts}
  esac
}
_kairos() {
  local cur prev path w i
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev="\${COMP_WORDS[COMP_CWORD-1]}"
  path=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ $w == -- ]] && { COMPREPLY=(); return 0; }
    [[ $w == -* ]] && continue
    if [[ " $(_kairos_subs "$path") " == *" $w "* ]]; then
      path="\${path:+$path/}$w"
    fi
  done
  case "$path|$prev" in
${values}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_kairos_opts "$path")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_kairos_subs "$path")" -- "$cur"))
  fi
  return 0
}
complete -F _kairos kairos
`;
}

/** Registers `kairos completion <shell>` (bash). */
export function registerCompletionCommand(program: Command, ctx: CliContext): void {
  program
    .command("completion")
    .description("print the shell completion script: source <(kairos completion bash)")
    .argument("<shell>", "bash")
    .action((shell: string) => {
      if (shell !== "bash")
        throw new KairosError(
          "invalid_argument",
          `completion: only bash is supported, got ${JSON.stringify(shell)}`,
          {
            field: "shell",
          },
        );
      ctx.io.out(bashCompletion(program));
      ctx.settled = true;
    });
}
