// Package lograte limits repetitive log lines. A line of one kind (a key
// the caller chooses: an OST, a peer address) is logged for the first
// Burst occurrences, then at most once per Every; the line that is logged
// carries how many of its kind were left out since the last one, so that
// an operator sees both that it goes on and how often.
//
// It is a token bucket per key, as golang.org/x/time/rate's Limiter, with
// the count of suppressed lines that a log needs, and without a
// dependency. The zero Limiter uses DefaultEvery and DefaultBurst.
package lograte

import (
	"sync"
	"time"
)

// Defaults of a zero Limiter.
const (
	DefaultEvery = 10 * time.Second
	DefaultBurst = 5
)

// maxKeys bounds the keys a Limiter remembers; past it the oldest state
// is forgotten (its next line is logged, as a first one).
const maxKeys = 1024

// Limiter decides which lines of each kind to log. Safe for concurrent
// use.
type Limiter struct {
	Every time.Duration // one line per Every after the burst; 0: DefaultEvery
	Burst int           // lines logged at once before the limit applies; 0: DefaultBurst
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*bucket // guarded by mu
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// Allow reports whether a line of kind key is to be logged now, and how
// many lines of that kind were suppressed since the last one allowed.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	every, burst := l.Every, l.Burst
	if every <= 0 {
		every = DefaultEvery
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		if l.keys == nil || len(l.keys) >= maxKeys {
			l.forgetOldestLocked()
		}
		b = &bucket{tokens: float64(burst), last: now}
		l.keys[key] = b
	}
	b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.last))/float64(every))
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// forgetOldestLocked makes room for a key: it drops the state least
// recently used, or makes the map. l.mu must be held.
func (l *Limiter) forgetOldestLocked() {
	if l.keys == nil {
		l.keys = make(map[string]*bucket)
		return
	}
	var oldest string
	var t time.Time
	for k, b := range l.keys {
		if oldest == "" || b.last.Before(t) {
			oldest, t = k, b.last
		}
	}
	delete(l.keys, oldest)
}
