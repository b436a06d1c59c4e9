#!/usr/bin/env -S node --max-semi-space-size=64
// Entry point for the `kairos` bin: runs the TypeScript CLI through tsx.
import { register } from "tsx/esm/api";
register();
await import("../src/cli/main.ts");
