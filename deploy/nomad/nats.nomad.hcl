# NATS JetStream for Kairos: a 3-server cluster, one server per host, R3-capable.
#
# Kairos keeps all of its state in JetStream KV buckets (`<cluster>_*`, replicas 3 in
# production). Read docs/deploy.md first; the rules that shape this job:
#
#   * nats-server >= 2.10.23. Before 2.9.21 a KV update's revision check is not serialized on
#     R3 buckets (nats-server #4320: two CAS writes can both win, which breaks every Kairos
#     fence); Kairos refuses replicas=3 on such a server. 2.10.23 adds `sync_interval` and
#     fixes streams forgotten after kill -9 (#6888).
#   * The store directory lives on a Nomad host volume named "nats-data" that each NATS host
#     declares in its client config, e.g.
#         client { host_volume "nats-data" { path = "/srv/nats" read_only = false } }
#     Only hosts that declare it are eligible, and the data stays on the host across restarts
#     and job updates. Never wipe it to "reset" a server: see docs/deploy.md, Backups.
#   * Routes are static: the three NATS hosts are fixed anyway (their data is on them), so
#     `nats_hosts` lists their addresses, a constraint pins the servers to them, and every
#     server gets the full route list (itself included; a route to self is ignored) from its
#     first start. Ports are static (4222/6222/8222, host network); `distinct_hosts` keeps two
#     servers off one host. Why not routes from Nomad service discovery: a JetStream cluster
#     sizes its meta group from the routes it starts with. Tried with nats-server 2.10.27: an
#     empty list is fatal ("JetStream cluster requires configured routes"), and servers that
#     start with only themselves and get the others by a later SIGHUP form a meta group of 2
#     that leaves the third server out. Clients still find the servers through the
#     "kairos-nats" Nomad service (deploy/nomad/kairos.nomad.hcl).
#   * server_name is the Nomad node's unique name: a JetStream peer's identity must follow its
#     data, and the data is on the host. A host that is lost for good leaves a peer behind:
#     remove it with `nats server raft peer-remove <name>` before adding a replacement.
#
# Validate before use: `nomad job validate deploy/nomad/nats.nomad.hcl` (not available in the
# sandbox this file was written in; see docs/deploy.md).

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "nats_hosts" {
  # The addresses (as Nomad fingerprints them: attr.unique.network.ip-address) of the three
  # hosts that run NATS and declare the "nats-data" host volume. Replace the examples.
  type    = list(string)
  default = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
}

variable "nats_image" {
  # Pin an exact version >= 2.10.23 (prefer a digest: image@sha256:...). The Kairos test suite
  # runs against 2.10.27.
  type    = string
  default = "nats:2.10.27"
}

variable "nats_cluster_name" {
  type    = string
  default = "kairos-nats"
}

variable "sync_interval" {
  # How often JetStream fsyncs its files.
  #   "always": fsync every write before it is acknowledged. An acknowledged Kairos write
  #             (job created, run claimed, lease renewed) survives even a simultaneous power
  #             loss of every NATS host. Cost: a disk flush on the write path; on slow disks
  #             this caps KV writes per second and adds latency to every CAS (the burst at :00
  #             is made of such writes). The figures in BENCHMARKS.md were NOT measured with it.
  #   "1s" (or similar short interval): writes are acknowledged once a quorum (2 of 3) holds
  #             them in memory/page cache; an OS crash or power loss of ONE host loses nothing
  #             (the other two have the write), but a correlated outage of two or more hosts
  #             within the interval can lose acknowledged writes.
  #   The 2.x default (2m) is far too long for a scheduler that promises "never lost".
  # Choose "always" unless the NATS hosts are in independent failure domains (separate power,
  # separate racks/zones) AND you have measured that fsync is your bottleneck.
  type    = string
  default = "always"
}

variable "max_file_store" {
  # JetStream file storage limit per server. Every server holds a full copy of every R3
  # bucket, so size it for all Kairos state plus headroom (docs/deploy.md, Sizing).
  type    = string
  default = "20G"
}

job "kairos-nats" {
  datacenters = var.datacenters
  type        = "service"

  group "nats" {
    count = 3

    # One server per host: two servers of the cluster on one host would make a host failure a
    # quorum failure.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    constraint {
      attribute = "${attr.unique.network.ip-address}"
      operator  = "set_contains_any"
      value     = join(",", var.nats_hosts)
    }

    network {
      port "client" {
        static = 4222
      }
      port "cluster" {
        static = 6222
      }
      port "monitor" {
        static = 8222
      }
    }

    volume "data" {
      type      = "host"
      source    = "nats-data"
      read_only = false
    }

    # Upgrade one server at a time and only after the previous one is healthy again, so two
    # of three are always up (quorum for every R3 bucket and for the JetStream meta group).
    update {
      max_parallel      = 1
      health_check      = "checks"
      min_healthy_time  = "30s"
      healthy_deadline  = "5m"
      progress_deadline = "10m"
      auto_revert       = false
    }

    # Never move a NATS server off its host on its own: its data is there.
    reschedule {
      attempts  = 0
      unlimited = false
    }

    restart {
      attempts = 10
      interval = "10m"
      delay    = "10s"
      mode     = "delay"
    }

    service {
      name     = "kairos-nats"
      port     = "client"
      provider = "nomad"
      tags     = ["client"]

      # Answers 200 once JetStream is enabled on this server. The stricter plain `/healthz`
      # (meta leader known, every stream and consumer current) is better for deciding that
      # an upgraded server has caught up, but it also fails while the cluster is still
      # forming on first start; check it by hand between upgrades (docs/deploy.md).
      check {
        name     = "nats-healthz"
        type     = "http"
        port     = "monitor"
        path     = "/healthz?js-enabled-only=true"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "nats-server" {
      driver = "docker"

      # A NATS server needs time to step down as leader of its streams and flush.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      config {
        image        = var.nats_image
        network_mode = "host"
        args         = ["--config", "/local/nats.conf"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
        read_only   = false
      }

      template {
        destination   = "local/nats.conf"
        # Nothing in it changes at run time; config changes come with a job update.
        change_mode   = "noop"
        data          = <<-EOT
          # Rendered by Nomad (deploy/nomad/nats.nomad.hcl). Do not edit on the host.
          server_name: "{{ env "node.unique.name" }}"
          listen: "0.0.0.0:{{ env "NOMAD_PORT_client" }}"
          client_advertise: "{{ env "NOMAD_IP_client" }}:{{ env "NOMAD_PORT_client" }}"
          http: "0.0.0.0:{{ env "NOMAD_PORT_monitor" }}"

          # Kairos bodies are small msgpack values; 1 MiB leaves room for job specs.
          max_payload: 1MB

          jetstream {
            store_dir: "/data/jetstream"
            max_file_store: "${var.max_file_store}"
            # Kairos uses no memory-backed streams.
            max_memory_store: 256MB
            sync_interval: "${var.sync_interval}"
          }

          cluster {
            name: "${var.nats_cluster_name}"
            listen: "0.0.0.0:{{ env "NOMAD_PORT_cluster" }}"
            advertise: "{{ env "NOMAD_IP_cluster" }}:{{ env "NOMAD_PORT_cluster" }}"
            # All three servers, this one included (a route to self is ignored).
            routes: [
              ${join(",\n    ", formatlist("\"nats-route://%s:6222\"", var.nats_hosts))}
            ]
          }

          # TODO(operator): NATS authentication and TLS. Kairos itself cannot use them yet
          # (it connects without credentials or TLS: docs/deploy.md, Security), so keep the
          # client port reachable only from the Kairos hosts (firewall / security groups).
        EOT
      }

      resources {
        cpu        = 1000
        memory     = 1024
        memory_max = 2048
      }
    }
  }
}
