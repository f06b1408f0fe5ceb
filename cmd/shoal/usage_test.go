package main

import (
	"regexp"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// pflag takes the text between backticks in a flag's usage as the name of
// its value in --help: `shoal mds --help` showed "--join shoal admin mds
// add" (issue 18). Every value name is a word in capitals (RATE) or the
// flag's type.
func TestFlagValueNames(t *testing.T) {
	ok := regexp.MustCompile(`^([A-Z][A-Z0-9_]*|[a-z0-9]+)?$`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if !ok.MatchString(name) {
				t.Errorf("%s --%s: value name %q in --help (backticks in its usage?)", c.CommandPath(), f.Name, name)
			}
		}
		c.LocalFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}
