"""The reconciler (docs/rules.md): list kept sandboxes, explain holds, salvage then retire."""
