"""Which model serves: stored models as scorers (`scoring`), the Uni-Con baseline,
pins, the judged race and the champion record (`judged_race`), the click race with
its serve-time drafting (`click_race`), and the one resolver of what serves now
(`what_serves`), used by serve, the simulator and both demos.
"""
