/**
 * Public surface of the sandbox area: import from here (or executor.ts), not from the
 * executor implementations.
 */
export * from "./executor.ts";
export { OutputTail, DEFAULT_OUTPUT_TAIL_BYTES } from "./output-tail.ts";
export { LABEL as DOCKER_LABEL } from "./docker-spec.ts";
export {
  ALLOW_ANY_IMAGE,
  checkImage,
  parseImagePolicy,
  parseImageRef,
  parseRegistry,
  type ImagePolicy,
} from "./image-policy.ts";
export { PULL_POLICIES } from "./options.ts";
export { DEFAULT_TASK_LIMITS, taskLimits, type TaskLimits } from "./task-rules.ts";
export {
  createTaskNetwork,
  firewallRules,
  inspectTaskNetwork,
  removeTaskNetwork,
  type TaskNetworkInfo,
} from "./task-network.ts";
