"""The HTML report: one offline Bokeh page of every layer on one time axis, incidents shaded."""
