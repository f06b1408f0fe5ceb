#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/shoal-epilog.sh): remove the
# job's scratch directory, and with SHOAL_UNMOUNT_IDLE=1 unmount Shoal when
# no other job runs on the node (docs/deploy.md). Runs as root.
set -u
MNT=${SHOAL_MOUNTPOINT:-/shoal}
log() { logger -t shoal-epilog "job ${SLURM_JOB_ID:-?}: $*"; }

if [[ -n "${SLURM_JOB_ID:-}" && -d "$MNT/scratch/job-$SLURM_JOB_ID" ]]; then
	rm -rf --one-file-system "$MNT/scratch/job-$SLURM_JOB_ID" || log "could not remove the scratch directory"
fi

[[ "${SHOAL_UNMOUNT_IDLE:-0}" == 1 ]] || exit 0
# Other jobs of this node still running?
others=$(squeue --noheader --nodelist "$(hostname -s)" --states=RUNNING,COMPLETING --format=%A 2>/dev/null |
	grep -vx "${SLURM_JOB_ID:-none}" | wc -l)
[[ "$others" -eq 0 ]] || exit 0
# Processes the job left behind keep the mount busy: kill what still
# uses it, then unmount (shoal mount flushes open files on SIGTERM).
fuser -k -TERM -m "$MNT" >/dev/null 2>&1 || true
sleep 2
if systemctl is-active --quiet shoal-mount.service; then
	systemctl stop shoal-mount.service
elif mountpoint -q "$MNT"; then
	fusermount3 -u "$MNT" || { log "unmount of $MNT failed; detaching it"; fusermount3 -u -z "$MNT"; }
fi
exit 0
