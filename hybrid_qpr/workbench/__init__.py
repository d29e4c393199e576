"""The relevance workbench (``hybrid-qpr serve``): a JSON API and a page that show every
search mode side by side, store a person's relevance judgments beside the index and tune the
fusion on them.

* ``service`` - what the API answers (health, search, compare, judgments, tune), no web framework;
* ``judgments`` - the judgments store (a BEIR eval set, written atomically);
* ``app`` - the Starlette app: routes, JSON errors, API key, the page (``static/``);
* ``openapi`` - the API's OpenAPI description.

Needs the ``serve`` extra (``pip install 'hybrid-qpr[serve]'``) for ``app``; the rest does not.
"""
