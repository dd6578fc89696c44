package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// shells are the shells completionCmd writes a script for, with how to load it.
var shells = []struct {
	name, load string
	gen        func(root *cobra.Command, w io.Writer) error
}{
	{"bash", "source <(runonce completion bash)", func(r *cobra.Command, w io.Writer) error { return r.GenBashCompletionV2(w, true) }},
	{"zsh", `runonce completion zsh > "${fpath[1]}/_runonce"   # then start a new shell`, func(r *cobra.Command, w io.Writer) error { return r.GenZshCompletion(w) }},
	{"fish", "runonce completion fish | source", func(r *cobra.Command, w io.Writer) error { return r.GenFishCompletion(w, true) }},
	{"powershell", "runonce completion powershell | Out-String | Invoke-Expression", func(r *cobra.Command, w io.Writer) error {
		return r.GenPowerShellCompletionWithDesc(w)
	}},
}

// completionCmd writes the completion script of a shell. The scripts complete commands,
// flags and --status's values by asking the binary (cobra's hidden __complete command),
// so they stay right as commands are added.
func completionCmd(root *cobra.Command) *cobra.Command {
	var names []string
	example := ""
	for _, s := range shells {
		names = append(names, s.name)
		example += "  " + s.load + "\n"
	}
	return &cobra.Command{
		Use:       "completion bash|zsh|fish|powershell",
		Short:     "print the shell completion script of a shell",
		Long:      "completion prints the script that completes runonce's commands and flags in a shell.",
		Example:   example,
		ValidArgs: names,
		Args:      exactArgs("a shell: bash, zsh, fish or powershell"),
		RunE: func(c *cobra.Command, args []string) error {
			for _, s := range shells {
				if s.name == args[0] {
					return s.gen(root, c.OutOrStdout())
				}
			}
			return usagef("completion: no shell %q: bash, zsh, fish or powershell", args[0])
		},
	}
}
