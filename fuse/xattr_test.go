package fuse

import (
	"testing"
	"time"
)

// TestCapCache checks the "no security.capability" cache, including a
// probe answered before a set through this mount and recorded after it.
func TestCapCache(t *testing.T) {
	var c capCache
	if c.absent() {
		t.Fatal("a new cache knows nothing")
	}
	c.remember(c.gen.Load(), time.Hour)
	if !c.absent() {
		t.Fatal("an absent answer is not remembered")
	}
	c.changing()
	if c.absent() {
		t.Fatal("a set does not forget the absent answer")
	}
	c.changing()

	// A probe starts, a set runs to its end, the probe's stale answer
	// arrives: it must not stick.
	gen := c.gen.Load()
	c.changing()
	c.changing()
	c.remember(gen, time.Hour)
	if c.absent() {
		t.Fatal("a probe from before a set left a stale absent answer")
	}
	// A probe that starts while a set is in flight is stale as well.
	c.changing()
	gen = c.gen.Load()
	c.changing()
	c.remember(gen, time.Hour)
	if c.absent() {
		t.Fatal("a probe from during a set left a stale absent answer")
	}
	// No caching with a zero attribute timeout.
	c.remember(c.gen.Load(), 0)
	if c.absent() {
		t.Fatal("cached with ttl 0")
	}
}
