# Kairos on Nomad: schedulers, API nodes and workers, each a group of `kairos node` processes
# with one role, against the NATS cluster of deploy/nomad/nats.nomad.hcl. Read docs/deploy.md.
#
# How the code gets onto the host: an `artifact` stanza downloads the release tarball that
# `npm run release` builds (scripts/release.sh: a commit's bin/, src/, package.json,
# package-lock.json and node_modules from `npm ci` — dev dependencies included, because
# bin/kairos.mjs runs the TypeScript through tsx — in dist/kairos-<version>-linux-x64.tar.gz,
# next to its .sha256), Nomad checks it against var.kairos_artifact_checksum and unpacks it into
# the task's local/kairos directory; the task runs the host's Node 20 on bin/kairos.mjs. Serve
# the tarball from an artifact store the Nomad clients can reach. Nothing is downloaded from a
# package registry at start. docs/deploy.md, "Release artefact".
#
#   * scheduler and api use the `exec` driver (chroot + cgroups; Node must be installed on the
#     host at var.node_bin, which the chroot's /usr copy carries along).
#   * worker uses `raw_exec`: it must reach the host's Docker socket, and any process that can
#     talk to that socket is root-equivalent on the host, so exec's chroot would add nothing
#     real. raw_exec must be enabled on worker hosts (plugin "raw_exec" { config { enabled =
#     true } }); keep it disabled elsewhere.
#
# A container image is the alternative where a registry is reachable (none is in the sandbox
# this was written in, and the repo ships no Dockerfile yet): see the commented `docker`
# stanzas in each task.
#
# Scheduler and API nodes create the cluster's buckets if they do not exist yet, and the first
# scheduler writes the partition config; a worker's NATS user may do neither, so workers wait
# (bounded, then restart) for a scheduler. Every group passes the same --cluster, --partitions
# and --replicas.
#
# NATS security (docs/security.md, "The bus"): every node connects over TLS with the NATS user of
# its role. Both come from Nomad Variables, written once by the operator (docs/deploy.md), one
# path per group, because a task's workload identity reads its job's path and its own group's,
# never another group's:
#   nomad/jobs/kairos           : nats_ca (PEM of the CA that signed the NATS servers'
#                                 certificates; public, every group)
#   nomad/jobs/kairos/scheduler : creds (<dir>/creds/scheduler.json from `kairos nats-auth <dir>
#                                 --cluster <name>`), secret_key (the cluster key of
#                                 task.secret_env: `openssl rand -base64 32`; the same for the life
#                                 of the cluster), run_token_keys (the key set that signs
#                                 KAIROS_RUN_TOKEN: `kairos run-token-keys new <file>`)
#   nomad/jobs/kairos/api       : creds (<dir>/creds/api.json), secret_key (the same key),
#                                 run_token_keys (the public set is enough:
#                                 `kairos run-token-keys public <file>`)
#   nomad/jobs/kairos/worker    : one item per worker host, creds_worker-<Nomad node id> (the file
#                                 <dir>/creds/worker-worker-<node id>.json that `kairos nats-auth
#                                 … --workers worker-<node id>,…` writes: that worker's own user,
#                                 pinned to its id; each worker task renders only its host's
#                                 item) — no key, no other role's creds
# Worker hosts run tenant code next to a root-equivalent Docker socket (and raw_exec): the
# scheduler and api groups never run on a host with raw_exec enabled, so nothing of theirs is on
# a worker host's disk either.
# Validate before use: `nomad job validate deploy/nomad/kairos.nomad.hcl`.

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "kairos_artifact_url" {
  # The release tarball (`npm run release`, see the header). Replace with your artifact store's URL.
  type    = string
  default = "https://artifacts.example.com/kairos/kairos-0.1.0-linux-x64.tar.gz"
}

variable "kairos_artifact_checksum" {
  # "sha256:<hex>" of the tarball: `npm run release` prints it (and writes it, sha256sum format,
  # to the tarball's .sha256 file). Nomad refuses a download that does not match.
  type    = string
  default = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
}

variable "node_bin" {
  # Node.js >= 20 on every Kairos host.
  type    = string
  default = "/usr/bin/node"
}

variable "cluster_name" {
  # Bucket and subject prefix (`kairos node --cluster`). Fixed for the life of the cluster.
  type    = string
  default = "kairos"
}

variable "partitions" {
  # Used only when the cluster is first created (stored in the `<cluster>_cluster` bucket);
  # afterwards the stored count wins and this value is ignored. Cannot be changed later
  # without a migration, which is not implemented. Choose ~16-32x the largest number of
  # schedulers you expect to run: 128 serves up to 8 schedulers at 16 partitions each.
  type    = number
  default = 128
}

variable "image_policy" {
  # Images tenants without their own policy may name (`kairos node --image-policy`, API nodes):
  # comma-separated "registry/namespace/" prefixes, "repo@sha256:<digest>", "repo:tag", or "*".
  # No default on purpose: choose it (docs/security.md). Give each tenant its own namespace
  # with `kairos admin tenant images <tenant_id> registry.example.com/<tenant>/`.
  type = string
}

variable "worker_count" {
  type    = number
  default = 3
}

variable "worker_slots" {
  # Concurrent attempts per worker. Size it with `npm run bench -- sandbox` on a worker host
  # (the Docker engine, not Kairos, is usually the limit) and with the host's memory: each
  # attempt's container may use up to its task's memory limit (default 256 MiB, node max
  # 2048 MiB), OUTSIDE this job's Nomad resources.
  type    = number
  default = 8
}

variable "log_level" {
  type    = string
  default = "info"
}

job "kairos" {
  datacenters = var.datacenters
  type        = "service"

  # ---------------------------------------------------------------------------------------
  # Schedulers: own the partitions (leases in KV) and host the job and tenant actors.
  # SIGTERM → the node releases its partition leases, finishes in-flight actor messages and
  # says goodbye; the remaining schedulers acquire the partitions (about 2 s). A killed
  # scheduler's partitions move only after failure detection (3 s) and the lease TTL (4 s).
  # ---------------------------------------------------------------------------------------
  group "scheduler" {
    count = 3

    # A host failure should take at most one scheduler.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # Never on a worker host (raw_exec is enabled only there): the scheduler's credentials and the
    # cluster key must not be on a host that runs tenant code.
    constraint {
      attribute = "${driver.raw_exec}"
      operator  = "!="
      value     = "1"
    }

    # /healthz, /readyz and /metrics on a port of their own (--metrics-port). Only Prometheus
    # and the Nomad checks need to reach it: firewall it off from everything else (or add
    # --metrics-token-file, docs/operations.md).
    network {
      port "metrics" {}
    }

    # One scheduler at a time: each stop moves ~1/n of the partitions, and the next one
    # starts only once the new allocation is ready — /readyz answers 200 when NATS answers and
    # every partition placement assigns to it is held (docs/operations.md).
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "3m"
      auto_revert      = true
    }

    service {
      name     = "kairos-scheduler"
      port     = "metrics"
      provider = "nomad"
      tags     = ["metrics"]

      # Readiness: NATS connected and placement settled.
      check {
        name     = "kairos-scheduler-readyz"
        type     = "http"
        path     = "/readyz"
        interval = "5s"
        timeout  = "3s"
      }

      # Liveness: restart a process that no longer serves HTTP at all.
      check {
        name     = "kairos-scheduler-healthz"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
        check_restart {
          limit = 3
          grace = "30s"
        }
      }
    }

    task "kairos" {
      driver = "exec"

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      artifact {
        source      = var.kairos_artifact_url
        destination = "local/kairos"
        options {
          checksum = var.kairos_artifact_checksum
        }
      }

      template {
        destination = "secrets/nats.env"
        env         = true
        # NATS clients learn the whole cluster from the server they reach; a changed server
        # list only matters at the next start, so do not restart every node when it changes.
        change_mode = "noop"
        data        = <<-EOT
          KAIROS_NATS_URL={{ range $i, $s := nomadService "kairos-nats" }}{{ if $i }},{{ end }}tls://{{ .Address }}:{{ .Port }}{{ end }}
          KAIROS_NATS_CREDS={{ env "NOMAD_SECRETS_DIR" }}/nats-creds.json
          KAIROS_SECRET_KEY_FILE={{ env "NOMAD_SECRETS_DIR" }}/secret.key
          KAIROS_RUN_TOKEN_KEYS_FILE={{ env "NOMAD_SECRETS_DIR" }}/run-token-keys.json
          KAIROS_NATS_TLS_CA={{ env "NOMAD_SECRETS_DIR" }}/nats-ca.pem
        EOT
      }

      # The cluster key that seals and opens task.secret_env (api seals, scheduler opens; workers
      # never hold it). From Nomad Variables; without it, jobs with secret_env are refused.
      template {
        destination = "secrets/secret.key"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/scheduler" }}{{ .secret_key }}{{ end }}
        EOT
      }

      # The run-token key set (docs/security.md, "Per-run credentials"): schedulers sign with its first key; workers never hold it.
      template {
        destination = "secrets/run-token-keys.json"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/scheduler" }}{{ .run_token_keys }}{{ end }}
        EOT
      }

      # This role's NATS user (scheduler, from the group's own variable path) and the CA of the
      # NATS servers (from the job's).
      template {
        destination = "secrets/nats-creds.json"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/scheduler" }}{{ .creds }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/nats-ca.pem"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos" }}{{ .nats_ca }}{{ end }}
        EOT
      }

      env {
        KAIROS_LOG_LEVEL = var.log_level
      }

      config {
        command = var.node_bin
        args = [
          "--max-semi-space-size=64", "${NOMAD_TASK_DIR}/kairos/bin/kairos.mjs", "node",
          "--roles", "scheduler",
          # Unique per allocation: a replacement allocation must never share a node id with
          # one that may still be running on a partitioned host.
          "--node-id", "scheduler-${NOMAD_SHORT_ALLOC_ID}",
          "--cluster", var.cluster_name,
          "--partitions", "${var.partitions}",
          "--replicas", "3",
          "--metrics-host", "${NOMAD_IP_metrics}",
          "--metrics-port", "${NOMAD_PORT_metrics}",
        ]
      }

      # Container alternative (registry reachable, image built from the same tarball):
      # driver = "docker"
      # config {
      #   image = "registry.example.com/kairos:0.1.0"
      #   args  = ["node", "--roles", "scheduler", "--node-id", "scheduler-${NOMAD_SHORT_ALLOC_ID}",
      #            "--cluster", var.cluster_name, "--partitions", "${var.partitions}", "--replicas", "3"]
      # }

      resources {
        cpu        = 1000
        memory     = 512
        memory_max = 1024
      }
    }
  }

  # ---------------------------------------------------------------------------------------
  # API: the HTTP API (Hono). Put a TLS-terminating load balancer in front of the service.
  # ---------------------------------------------------------------------------------------
  group "api" {
    count = 2

    # Never on a worker host (see the scheduler group): the api credentials and the cluster key
    # stay off hosts that run tenant code.
    constraint {
      attribute = "${driver.raw_exec}"
      operator  = "!="
      value     = "1"
    }

    # "http": the public API (/v1, /healthz, /readyz; never /metrics). "metrics": /metrics (and
    # /healthz, /readyz) on the host's private address, for Prometheus only.
    network {
      port "http" {}
      port "metrics" {}
    }

    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "3m"
      auto_revert      = true
    }

    service {
      name     = "kairos-api"
      port     = "http"
      provider = "nomad"

      # Readiness: /readyz answers 503 while this node cannot reach NATS, so the service is
      # unhealthy (and out of the load balancer's list) until it can.
      check {
        name     = "kairos-api-readyz"
        type     = "http"
        path     = "/readyz"
        interval = "5s"
        timeout  = "3s"
      }

      # Liveness: /healthz answers while the process serves HTTP, even with NATS down.
      check {
        name     = "kairos-api-healthz"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
        check_restart {
          limit = 3
          grace = "30s"
        }
      }
    }

    service {
      name     = "kairos-api-metrics"
      port     = "metrics"
      provider = "nomad"
      tags     = ["metrics"]
    }

    task "kairos" {
      driver = "exec"

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
      # Deregister from the service catalogue first, so the load balancer stops sending new
      # requests before the process closes its listener.
      shutdown_delay = "5s"

      artifact {
        source      = var.kairos_artifact_url
        destination = "local/kairos"
        options {
          checksum = var.kairos_artifact_checksum
        }
      }

      template {
        destination = "secrets/nats.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          KAIROS_NATS_URL={{ range $i, $s := nomadService "kairos-nats" }}{{ if $i }},{{ end }}tls://{{ .Address }}:{{ .Port }}{{ end }}
          KAIROS_NATS_CREDS={{ env "NOMAD_SECRETS_DIR" }}/nats-creds.json
          KAIROS_SECRET_KEY_FILE={{ env "NOMAD_SECRETS_DIR" }}/secret.key
          KAIROS_RUN_TOKEN_KEYS_FILE={{ env "NOMAD_SECRETS_DIR" }}/run-token-keys.json
          KAIROS_NATS_TLS_CA={{ env "NOMAD_SECRETS_DIR" }}/nats-ca.pem
        EOT
      }

      # The cluster key that seals and opens task.secret_env (api seals, scheduler opens; workers
      # never hold it). From Nomad Variables; without it, jobs with secret_env are refused.
      template {
        destination = "secrets/secret.key"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/api" }}{{ .secret_key }}{{ end }}
        EOT
      }

      # The run-token key set (docs/security.md, "Per-run credentials"): API nodes verify with it and publish /.well-known/jwks.json; workers never hold it.
      template {
        destination = "secrets/run-token-keys.json"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/api" }}{{ .run_token_keys }}{{ end }}
        EOT
      }

      # This role's NATS user (api, from the group's own variable path) and the CA of the NATS
      # servers (from the job's).
      template {
        destination = "secrets/nats-creds.json"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/api" }}{{ .creds }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/nats-ca.pem"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos" }}{{ .nats_ca }}{{ end }}
        EOT
      }

      env {
        KAIROS_LOG_LEVEL = var.log_level
      }

      config {
        command = var.node_bin
        args = [
          "--max-semi-space-size=64", "${NOMAD_TASK_DIR}/kairos/bin/kairos.mjs", "node",
          "--roles", "api",
          "--node-id", "api-${NOMAD_SHORT_ALLOC_ID}",
          "--cluster", var.cluster_name,
          "--partitions", "${var.partitions}",
          "--replicas", "3",
          "--api-host", "${NOMAD_IP_http}",
          "--api-port", "${NOMAD_PORT_http}",
          "--metrics-host", "${NOMAD_IP_metrics}",
          "--metrics-port", "${NOMAD_PORT_metrics}",
          "--image-policy", var.image_policy,
        ]
      }

      # Container alternative:
      # driver = "docker"
      # config {
      #   image = "registry.example.com/kairos:0.1.0"
      #   ports = ["http"]
      #   args  = ["node", "--roles", "api", "--node-id", "api-${NOMAD_SHORT_ALLOC_ID}",
      #            "--cluster", var.cluster_name, "--partitions", "${var.partitions}", "--replicas", "3",
      #            "--api-host", "0.0.0.0", "--api-port", "${NOMAD_PORT_http}", "--image-policy", var.image_policy]
      # }

      resources {
        cpu        = 500
        memory     = 256
        memory_max = 512
      }
    }
  }

  # ---------------------------------------------------------------------------------------
  # Workers: run each attempt in a locked-down Docker container (docs/sandbox.md).
  #
  # SECURITY: the worker process talks to the host's Docker engine through
  # /var/run/docker.sock. Whoever controls that socket controls the host (it can start a
  # privileged container that mounts /), so the worker itself is privileged relative to the
  # host: treat worker hosts as a separate trust zone, run nothing else sensitive on them, and
  # keep the Kairos artifact's integrity (checksum above). The TASKS are not privileged: their
  # containers get no network, a read-only root, no capabilities, no-new-privileges, a
  # non-root user and never the Docker socket (docs/sandbox.md, Lock-down).
  #
  # Task containers are started by the engine, not by Nomad: their CPU and memory are not in
  # this group's `resources`. Reserve host capacity for them (client `reserved` block, or
  # dedicated worker hosts) of about worker_slots × the per-task memory limit.
  # ---------------------------------------------------------------------------------------
  group "worker" {
    count = var.worker_count

    # One worker per Docker engine. The worker id is derived from the Nomad node, so a
    # restarted or replaced worker on the same host has the same id and kills the orphaned
    # containers of its predecessor (containers are labelled with the worker id).
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    constraint {
      attribute = "${driver.raw_exec}"
      value     = "1"
    }

    network {
      port "metrics" {}
    }

    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "3m"
      auto_revert      = true
    }

    service {
      name     = "kairos-worker"
      port     = "metrics"
      provider = "nomad"
      tags     = ["metrics"]

      # Readiness: NATS connected and the Docker engine answers.
      check {
        name     = "kairos-worker-readyz"
        type     = "http"
        path     = "/readyz"
        interval = "5s"
        timeout  = "3s"
      }

      check {
        name     = "kairos-worker-healthz"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
        check_restart {
          limit = 3
          grace = "30s"
        }
      }
    }

    task "kairos" {
      driver = "raw_exec"

      # On SIGTERM a worker drains (docs/operations.md, "Drain"): no new attempts, running ones
      # finish for up to --drain-timeout-ms (60 s below), the rest are handed back and retried
      # elsewhere. The kill timeout covers the drain plus the kills and the hand-back reports;
      # the Nomad client's max_kill_timeout must allow it.
      kill_signal  = "SIGTERM"
      kill_timeout = "75s"

      artifact {
        source      = var.kairos_artifact_url
        destination = "local/kairos"
        options {
          checksum = var.kairos_artifact_checksum
        }
      }

      template {
        destination = "secrets/nats.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          KAIROS_NATS_URL={{ range $i, $s := nomadService "kairos-nats" }}{{ if $i }},{{ end }}tls://{{ .Address }}:{{ .Port }}{{ end }}
          KAIROS_NATS_CREDS={{ env "NOMAD_SECRETS_DIR" }}/nats-creds.json
          KAIROS_NATS_TLS_CA={{ env "NOMAD_SECRETS_DIR" }}/nats-ca.pem
        EOT
      }

      # This worker's own NATS user (`worker-<node id>`, pinned to its id's offers, heartbeats,
      # completions and adverts: docs/security.md), from the group's own variable path (the
      # worker's workload identity cannot read the scheduler's or api's path, where the cluster
      # key is): one item per worker host, keyed by the node id below (docs/deploy.md); a host
      # without its item renders an empty file and the worker refuses to start — generate users
      # for new hosts before they join. And the CA of the NATS servers (from the job's path).
      template {
        destination = "secrets/nats-creds.json"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos/worker" }}{{ index . (printf "creds_worker-%s" (env "node.unique.id")) }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/nats-ca.pem"
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/kairos" }}{{ .nats_ca }}{{ end }}
        EOT
      }

      env {
        KAIROS_LOG_LEVEL = var.log_level
        # The engine socket is dockerode's default, /var/run/docker.sock; set DOCKER_HOST
        # here to use another one.
      }

      config {
        command = var.node_bin
        args = [
          "--max-semi-space-size=64", "${NOMAD_TASK_DIR}/kairos/bin/kairos.mjs", "node",
          "--roles", "worker",
          "--node-id", "worker-${node.unique.id}",
          "--cluster", var.cluster_name,
          "--partitions", "${var.partitions}",
          "--replicas", "3",
          # Explicit: a worker never falls back to the unisolated process executor.
          "--executor", "docker",
          "--slots", "${var.worker_slots}",
          "--drain-timeout-ms", "60000",
          "--metrics-host", "${NOMAD_IP_metrics}",
          "--metrics-port", "${NOMAD_PORT_metrics}",
        ]
      }

      # Container alternative (the docker plugin must allow volumes: plugin "docker" { config {
      # volumes { enabled = true } } }); the socket mount makes the container root-equivalent
      # on the host, exactly like raw_exec:
      # driver = "docker"
      # config {
      #   image   = "registry.example.com/kairos:0.1.0"
      #   volumes = ["/var/run/docker.sock:/var/run/docker.sock"]
      #   args    = ["node", "--roles", "worker", "--node-id", "worker-${node.unique.id}",
      #              "--cluster", var.cluster_name, "--partitions", "${var.partitions}", "--replicas", "3",
      #              "--executor", "docker", "--slots", "${var.worker_slots}"]
      # }

      resources {
        cpu        = 500
        memory     = 512
        memory_max = 1024
      }
    }
  }
}
