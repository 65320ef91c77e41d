package cli

import (
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// bindSettings sets each flag of the command that its command line left
// alone to the value its environment variable or kvaudit.yaml gives, so
// that option fields bound to flags (BoolVar(&opts.X, ...)) hold the
// resolved setting, as config's getters read it. List flags are left as
// they are: Strings reads them.
func (c *config) bindSettings() error {
	var err error
	c.cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || strings.HasSuffix(f.Value.Type(), "Slice") {
			return
		}
		if _, fromFile := c.FromFile(f.Name); !fromFile && os.Getenv(envName(f.Name)) == "" {
			return
		}
		if e := f.Value.Set(c.String(f.Name)); e != nil {
			err = usageErrorf("%s: %v", c.Source(f.Name), e)
		}
	})
	return err
}
