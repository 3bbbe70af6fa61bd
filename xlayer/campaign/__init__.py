"""Campaigns: many bundles analyzed as Dask tasks into one Parquet dataset partitioned by the bundles' tags,
summarized per service condition with confidence intervals and theory bounds, and drawn as one report.

- `xlayer.campaign.task`: what one bundle gives (the `xlayer analyze` analysis and per-layer summaries).
- `xlayer.campaign.store`: the dataset on disk (hive partitions, atomic files, ``campaign.json``).
- `xlayer.campaign.run`: the bundles of a campaign run on a Dask cluster.
- `xlayer.campaign.summary`: statistics per condition (``xlayer campaign summary``).
- `xlayer.campaign.report`: the campaign's HTML page (``xlayer campaign report``).
- `xlayer.campaign.theory`: Bianchi's DCF saturation throughput and the 802.11 maximum.
"""
