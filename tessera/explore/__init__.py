"""Design-space exploration: the resource and clock model fitted on measured builds
(``resource_model``), the sweep that measures them (``sweep``), and the board build records
both read (``board_builds.json``, written from build reports by ``build_records``)."""
