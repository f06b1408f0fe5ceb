package fuse

// Caller identity (docs/security.md). Every client call a FUSE request
// makes carries the uid and gid of the process that made the request, and
// its supplementary groups, so that the MDS checks POSIX permissions for
// that user (client.WithUser). FUSE reports the caller's uid, gid and pid
// but not its groups: those are read from /proc/PID/status and kept for a
// short while per pid, since a process makes requests in bursts.
// Requests the kernel makes on its own (pid 0: writeback of dirty pages,
// RELEASE after the last close) carry the ids the kernel gives them and no
// groups.

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/wire"
)

// groupsTTL is how long the supplementary groups read for a pid are used.
// A process rarely changes its groups (setgroups(2) before dropping
// privileges, at its start); a new process that reuses a pid within this
// time could be given its predecessor's groups, so it is kept short.
const groupsTTL = 2 * time.Second

// groupsCacheMax bounds the cache; past it, expired entries are dropped,
// and if none were, the whole cache.
const groupsCacheMax = 4096

type groupsEntry struct {
	uid, gid uint32 // the caller's ids when the groups were read
	groups   []uint32
	at       time.Time
}

// groupsCache holds the supplementary groups of recent callers by pid.
type groupsCache struct {
	// procDir is /proc; tests point it elsewhere.
	procDir string
	mu      struct {
		sync.Mutex
		m map[uint32]groupsEntry // by pid
	}
}

// groups returns the supplementary groups of process pid, which made a
// request as uid:gid. It returns nil when they cannot be read (the process
// is gone, or lives in another pid namespace) or when the process's ids no
// longer match the request's (it changed them, or the pid was reused).
func (g *groupsCache) groups(pid, uid, gid uint32) []uint32 {
	if pid == 0 {
		return nil
	}
	now := time.Now()
	g.mu.Lock()
	e, ok := g.mu.m[pid]
	g.mu.Unlock()
	if ok && e.uid == uid && e.gid == gid && now.Sub(e.at) < groupsTTL {
		return e.groups
	}
	groups, ok := readGroups(g.procDir, pid, uid, gid)
	if !ok {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.m == nil {
		g.mu.m = map[uint32]groupsEntry{}
	}
	if len(g.mu.m) >= groupsCacheMax {
		for p, e := range g.mu.m {
			if now.Sub(e.at) >= groupsTTL {
				delete(g.mu.m, p)
			}
		}
		if len(g.mu.m) >= groupsCacheMax {
			clear(g.mu.m)
		}
	}
	g.mu.m[pid] = groupsEntry{uid: uid, gid: gid, groups: groups, at: now}
	return groups
}

// readGroups parses the Groups line of PROC/PID/status. ok is false when
// the file cannot be read or the process's effective ids are not uid:gid
// (FUSE reports the fsuid and fsgid, which follow the effective ids).
func readGroups(proc string, pid, uid, gid uint32) (groups []uint32, ok bool) {
	b, err := os.ReadFile(proc + "/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil, false
	}
	return parseStatus(b, uid, gid)
}

// parseStatus reads the Uid, Gid and Groups lines of a /proc/PID/status
// file. The Uid and Gid lines list the real, effective, saved and file
// system ids; the file system ids must be uid and gid.
func parseStatus(b []byte, uid, gid uint32) (groups []uint32, ok bool) {
	var uidOK, gidOK, seenGroups bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, found := bytes.Cut(sc.Bytes(), []byte(":"))
		if !found {
			continue
		}
		f := bytes.Fields(val)
		switch string(key) {
		case "Uid":
			uidOK = len(f) == 4 && string(f[3]) == strconv.FormatUint(uint64(uid), 10)
		case "Gid":
			gidOK = len(f) == 4 && string(f[3]) == strconv.FormatUint(uint64(gid), 10)
		case "Groups":
			seenGroups = true
			for _, s := range f {
				if len(groups) >= wire.MaxGroups {
					break
				}
				v, err := strconv.ParseUint(string(s), 10, 32)
				if err != nil {
					return nil, false
				}
				groups = append(groups, uint32(v))
			}
		}
	}
	if !uidOK || !gidOK || !seenGroups {
		return nil, false
	}
	return groups, true
}

// detach returns ctx without its cancellation and with the request's
// caller as the identity of the client calls made with it.
//
// Cancellation: go-fuse cancels a request's context when the kernel
// forwards an interrupt, and the kernel does so for any signal the caller
// handles, including the SIGURG the Go runtime sends its own threads for
// preemption. Honouring it would fail the reads, renames and creates of
// ordinary programs with EINTR, and a cancelled namespace call may still
// have been applied by the MDS. Fatal signals need no help: the kernel
// stops waiting for the reply by itself. So every call runs to its end,
// bounded by the client's own timeouts.
//
// It also gives the request a trace id (wire.NewTraceID), which its calls
// carry to the MDS and the OSTs, whose log lines about them name it.
func (m *Mounted) detach(ctx context.Context) context.Context {
	out := context.WithoutCancel(ctx)
	if wire.TraceID(ctx) == "" {
		out = wire.WithTraceID(out, wire.NewTraceID())
	}
	c, ok := gofuse.FromContext(ctx)
	if !ok {
		return out
	}
	return client.WithUser(out, client.User{UID: c.Uid, GID: c.Gid, Groups: m.groups.groups(c.Pid, c.Uid, c.Gid)})
}
