# tflint v0.64.0 with only its bundled terraform ruleset: no plugin is downloaded, so it
# runs offline (deploy/tools.sh installs it; deploy/deploy_test.go runs it). The google
# ruleset would need a download and credentials-free provider schemas we cannot fetch.
config {
  # Local modules are read from disk; nothing needs `terraform init`.
  call_module_type = "local"
}

plugin "terraform" {
  enabled = true
  preset  = "all"
}
