"""The reconciler (DOMAIN §2): list kept sandboxes, explain holds, salvage then retire."""
