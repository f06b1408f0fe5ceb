package cache

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/datanet"
)

// blockBufs is the cache's pool of block buffers. A first read behind a
// slow cache disk holds up to Options.FillMemory of them at once (fill.go),
// so they come from anonymous mappings outside the Go heap, in regions
// backed by huge pages where the kernel allows: a fresh heap buffer cost
// a page fault and a zeroed page every 4 KiB (about a tenth of the
// process's CPU in the first read's profile, docs/cache.md), and the
// heap's growth and the scavenger's return of it repeated that every
// epoch. The pool grows ahead of its users: when fewer than a region's
// buffers are free, a goroutine of its own maps and touches the next
// region, so the zeroing of fresh pages runs beside the readers instead
// of inside their reads. The regions are kept while in use and unmapped
// once every buffer has been free for trimIdle.
type blockBufs struct {
	bs   int64
	grow chan struct{} // wakes the grower; closed by stop
	wg   sync.WaitGroup

	mu      sync.Mutex
	free    []*[]byte
	regions [][]byte // mapped; unmapped only when inUse is 0
	inUse   int
	lastUse time.Time
	growing bool // a wake-up of the grower is pending or it runs
}

// start starts the grower; stop ends it.
func (p *blockBufs) start(bs int64) {
	p.bs = bs
	p.grow = make(chan struct{}, 1)
	p.wg.Add(1)
	go p.grower()
}

func (p *blockBufs) stop() {
	close(p.grow)
	p.wg.Wait()
}

// grower maps and touches a region whenever get finds the free buffers
// below one region's worth.
func (p *blockBufs) grower() {
	defer p.wg.Done()
	for range p.grow {
		r := p.mapRegion(true)
		p.mu.Lock()
		if r != nil {
			p.addRegionLocked(r)
		}
		p.growing = false
		p.mu.Unlock()
	}
}

// regionBytes is the size of one mapping (rounded to whole blocks).
const regionBytes = 32 << 20

// trimIdle is how long every buffer must have been free before the
// regions are unmapped.
const trimIdle = 10 * time.Second

// get returns a free buffer of one block, aligned to 4 KiB.
func (p *blockBufs) get() *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		p.growLocked()
	}
	bp := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.inUse++
	if !p.growing && int64(len(p.free))*p.bs < regionBytes && p.grow != nil {
		p.growing = true
		select {
		case p.grow <- struct{}{}:
		default:
		}
	}
	return bp
}

// put gives back a buffer get returned.
func (p *blockBufs) put(bp *[]byte) {
	p.mu.Lock()
	p.free = append(p.free, bp)
	p.inUse--
	p.lastUse = time.Now()
	p.mu.Unlock()
}

// growLocked adds a region's buffers to the free list, or one buffer from
// the Go heap when the mapping fails. It runs under the pool's lock, in a
// get that found no free buffer, so it maps without touching: the pages
// fault in as the caller's read fills them (only the grower, outside the
// lock, touches ahead).
func (p *blockBufs) growLocked() {
	if r := p.mapRegion(false); r != nil {
		p.addRegionLocked(r)
		return
	}
	b := datanet.AlignedBuf(int(p.bs))
	p.free = append(p.free, &b)
}

// mapRegion maps a region, touching its pages when touch is set; nil if
// it cannot.
func (p *blockBufs) mapRegion(touch bool) []byte {
	size := max(regionBytes/p.bs, 1) * p.bs
	r, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	_ = unix.Madvise(r, unix.MADV_HUGEPAGE) // a hint: kernels without THP map small pages
	if touch {
		for i := 0; i < len(r); i += 4096 {
			r[i] = 0
		}
	}
	return r
}

func (p *blockBufs) addRegionLocked(r []byte) {
	p.regions = append(p.regions, r)
	for off := int64(0); off+p.bs <= int64(len(r)); off += p.bs {
		b := r[off : off+p.bs : off+p.bs]
		p.free = append(p.free, &b)
	}
}

// trim unmaps the regions when no buffer is in use and none has been for
// idle.
func (p *blockBufs) trim(idle time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse != 0 || len(p.regions) == 0 || time.Since(p.lastUse) < idle {
		return
	}
	p.free = nil
	for _, r := range p.regions {
		_ = unix.Munmap(r)
	}
	p.regions = nil
}
