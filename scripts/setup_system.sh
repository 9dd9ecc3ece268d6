#!/usr/bin/env bash
# Install the system packages looper's make targets and test tiers need (Debian, as root).
# The one place that knows them is scripts/system_packages.txt (tier -> Debian packages);
# `make test`, `make demo` and .ci/run call this script, so the two commands do the set-up.
#
#   scripts/setup_system.sh [TIER ...]   install what is missing (default: every tier)
#   scripts/setup_system.sh --check [TIER ...]   install nothing; say what is missing
#   scripts/setup_system.sh --line       print the one apt line for every package
#
# Tiers named in LOOPER_SKIP_TIERS (comma separated, e.g. ssh,browser,slurm) are left out;
# `base` (git, python3-venv, bubblewrap) cannot be skipped. Nothing missing: exit 0 without touching
# apt. Something missing as root with apt-get: apt-get install it, check again. Something
# missing otherwise (not root, or no apt-get): print the one apt line and exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."

TABLE=scripts/system_packages.txt
PY="${PY:-python3}"

log() { echo "setup_system: $*" >&2; }

# tier -> packages, from the table
declare -A PACKAGES=()
ORDER=()
while read -r tier rest; do
  case "$tier" in ''|'#'*) continue ;; esac
  PACKAGES[$tier]="$rest"
  ORDER+=("$tier")
done < "$TABLE"

all_packages() { local t out=(); for t in "${ORDER[@]}"; do out+=(${PACKAGES[$t]}); done; echo "${out[*]}"; }
apt_line() { echo "apt-get install -y --no-install-recommends $*"; }

# present PACKAGE: 0 when what the tests use from that package is on this machine
present() {
  case "$1" in
    git) command -v git >/dev/null ;;
    python3-venv) "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
    openssh-server) [ -x /usr/sbin/sshd ] ;;
    openssh-client) command -v ssh >/dev/null && command -v ssh-keygen >/dev/null ;;
    rsync) command -v rsync >/dev/null ;;
    chromium) [ -n "${LOOPER_CHROMIUM:-}" ] && command -v "$LOOPER_CHROMIUM" >/dev/null \
                || command -v chromium >/dev/null || command -v chromium-browser >/dev/null ;;
    slurm-wlm) command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
                 && command -v sbatch >/dev/null && command -v scontrol >/dev/null ;;
    munge) command -v munged >/dev/null && command -v munge >/dev/null ;;
    bubblewrap) command -v bwrap >/dev/null ;;
    *) dpkg -s "$1" >/dev/null 2>&1 ;;
  esac
}

CHECK_ONLY=0
case "${1:-}" in
  --line) apt_line "$(all_packages)"; exit 0 ;;
  --check) CHECK_ONLY=1; shift ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
esac

# which tiers: the arguments (default all), less LOOPER_SKIP_TIERS
SKIP_LIST="${LOOPER_SKIP_TIERS:-}"
SKIP=",$SKIP_LIST,"
for s in ${SKIP_LIST//,/ }; do
  if [ -z "${PACKAGES[$s]+x}" ]; then
    log "LOOPER_SKIP_TIERS names an unknown tier '$s' (tiers: ${ORDER[*]})"; exit 2
  fi
done
case "$SKIP" in *,base,*) log "the base tier (git, python3-venv, bubblewrap) cannot be skipped"; exit 2 ;; esac
WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=("${ORDER[@]}")
MISSING=(); SKIPPED=(); MISSING_TIERS=()
for t in "${WANT[@]}"; do
  if [ -z "${PACKAGES[$t]+x}" ]; then log "unknown tier '$t' (tiers: ${ORDER[*]})"; exit 2; fi
  case "$SKIP" in *",$t,"*) SKIPPED+=("$t"); continue ;; esac
  n=${#MISSING[@]}
  for p in ${PACKAGES[$t]}; do present "$p" || MISSING+=("$p"); done
  [ ${#MISSING[@]} -eq "$n" ] || [ "$t" = base ] || MISSING_TIERS+=("$t")
done
[ ${#SKIPPED[@]} -eq 0 ] || log "tiers skipped by LOOPER_SKIP_TIERS: ${SKIPPED[*]}"
[ ${#MISSING[@]} -gt 0 ] || exit 0

if [ "$CHECK_ONLY" = 1 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  log "missing system packages: ${MISSING[*]}"
  log "install them as root (Debian):"
  apt_line "${MISSING[*]}" >&2
  tiers="${MISSING_TIERS[*]:-}"
  log "or opt out of those tiers by name: LOOPER_SKIP_TIERS=${tiers// /,} (their tests are then skipped and named)"
  exit 1
fi

log "installing ${MISSING[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
STILL=()
for p in "${MISSING[@]}"; do present "$p" || STILL+=("$p"); done
if [ ${#STILL[@]} -gt 0 ]; then
  log "installed, but still not usable: ${STILL[*]}"; exit 1
fi
log "installed ${MISSING[*]}"
