#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/shoal-prolog.sh, with
# PrologFlags=Alloc so that it runs when the node is allocated): make sure
# the node has the Shoal mount before the job starts (docs/deploy.md).
# Runs as root. Exits non-zero (and so drains the node, with the reason in
# slurmd's log) when the mount cannot be made.
#
# The mount is shared by the jobs of the node and stays up between jobs;
# the Epilog unmounts it when the node's last job ends, if SHOAL_UNMOUNT_IDLE=1.
set -u
MNT=${SHOAL_MOUNTPOINT:-/shoal}
CONFIG=${SHOAL_CONFIG:-/etc/shoal/mount.yaml}
TIMEOUT=${SHOAL_MOUNT_TIMEOUT:-60}
log() { logger -t shoal-prolog "job ${SLURM_JOB_ID:-?}: $*"; }

if ! mountpoint -q "$MNT"; then
	if systemctl cat shoal-mount.service >/dev/null 2>&1; then
		systemctl start shoal-mount.service
	else
		mkdir -p "$MNT"
		# Detached from the prolog: the mount outlives it.
		setsid /usr/local/bin/shoal mount --config "$CONFIG" "$MNT" \
			</dev/null >>/var/log/shoal-mount.log 2>&1 &
	fi
	for ((i = 0; i < TIMEOUT; i++)); do
		mountpoint -q "$MNT" && break
		sleep 1
	done
fi
if ! mountpoint -q "$MNT" || ! stat -t "$MNT" >/dev/null 2>&1; then
	log "no Shoal mount at $MNT after ${TIMEOUT}s"
	exit 1
fi

# A per-job scratch directory owned by the job's user, removed by the
# Epilog. The MDS checks that user's permissions on everything else.
if [[ -n "${SLURM_JOB_USER:-}" && -n "${SLURM_JOB_ID:-}" && -d "$MNT/scratch" ]]; then
	d="$MNT/scratch/job-$SLURM_JOB_ID"
	mkdir -p "$d" && chown "$SLURM_JOB_USER" "$d" && chmod 0700 "$d"
fi
exit 0
