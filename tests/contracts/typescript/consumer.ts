// A TypeScript front end's use of the client, compiled by tsc --strict in tests/contracts/test_client.py:
// it must compile, and each @ts-expect-error line must be an error (a type that let it through fails).
import {
  type AlertTriggered,
  type ConnectionStatus,
  type StreamEvents,
  connectFeedStream,
  connectNotificationStream,
  connectStoryStream,
  loadTenantFeatureFlags,
} from '../../../public/ermis-realtime.js';

const statuses: ConnectionStatus[] = [];
const notifications = connectNotificationStream({
  onStatus: (status) => statuses.push(status),
  onEvent: (name, payload) => {
    if (name === 'alert.triggered') {
      const alert = payload as AlertTriggered;
      const severity: 'info' | 'warning' | 'critical' = alert.severity;
      void severity;
    }
  },
  onInvalid: (name, data) => console.warn(name, data),
});
notifications.close();

connectFeedStream({ onChange: (_kind, watermark) => watermark.draftCount.toFixed(0) });
connectStoryStream('story-1', { onPhase: (phase) => phase.status.toUpperCase() });

const review: StreamEvents['review.status.changed'] = {
  id: 'r',
  storyId: 's',
  headline: 'h',
  action: 'approved',
  tenantScopeId: null,
  changedAt: '2026-12-05T10:00:00.000Z',
  initial: false,
};
void review;

// @ts-expect-error: not an action the review workflow has
const skewed: StreamEvents['review.status.changed']['action'] = 'deleted';
void skewed;
// @ts-expect-error: not a status
const status: ConnectionStatus = 'live';
void status;
// @ts-expect-error: the story id is required
connectStoryStream();
// @ts-expect-error: draftCount is a number
const count: string = ({} as StreamEvents['feed.changed']).draftCount;
void count;

void loadTenantFeatureFlags().then((flags) => flags.instantAlerts === true);
