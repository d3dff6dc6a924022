"""What the extender and the admission webhook share: how a pod names its claims (claimrefs), the rules
and limits both enforce (rules), serving TLS (tls), HTTP limits (httpguard) and how metrics are
registered (metrics).

A leaf package: it imports neither extender nor webhook, so both may import it and neither imports
the other's internals (extender's commands compose the webhook; the webhook never imports extender).
"""
