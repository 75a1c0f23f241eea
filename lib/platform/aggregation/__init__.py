"""The aggregation build: catalogs of feeds → fetched → parsed → clustered → synthesised stories.

``stories.list_aggregated_stories`` is the entry point; ``stories.peek_tenant_scoped_aggregated_stories``
reads the cache without building. The stages live one per module: ``sources``, ``fetch``,
``parse``, ``cluster``, ``synthesis``, ``build``, ``lock``.
"""
