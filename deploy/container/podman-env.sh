# Sourced by scripts/container-build and scripts/container-test: points podman and
# buildah (CONTAINERS_CONF) at settings that work on CI machines (Debian bookworm
# VMs, root, no Docker engine), written to $LAYERSERVE_CACHE_DIR. Nothing else on
# the machine is changed.
cache="${LAYERSERVE_CACHE_DIR:-/var/cache/layerserve}"
mkdir -p "$cache"
nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; then nofile=65536; fi
cat >"$cache/containers.conf" <<CONF
[containers]
# runc fails with setrlimit EPERM unless the limits are explicit: open files up to
# this shell's own hard limit (it differs between machines), and a process limit
# low enough to be granted (here 96365, the host's own, was refused; 4096 works).
default_ulimits = ["nofile=$nofile:$nofile", "nproc=4096:4096"]
# Containers share the host's network: no bridge, no NAT, loopback ports only.
netns = "host"

[engine]
# crun (podman's default) fails on these hosts' hybrid cgroup hierarchy; runc works.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$cache/containers.conf"
